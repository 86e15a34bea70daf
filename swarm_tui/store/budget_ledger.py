"""A run's budget cap shared by its workers: each draws an allowance from the cap.

Every worker's row holds what it drew (`granted_usd`) and what its stored results cost
(`spent_usd`, written in the same transaction as those results: store/fences.py). The
run has committed, per worker, the larger of the two while the worker lives and what it
spent once it has ended — so a worker that leaves gives back what it did not spend, and
the sum never passes the cap: every draw is one transaction that sees all the others
(serialised by an advisory lock on PostgreSQL, BEGIN IMMEDIATE on SQLite).

A worker silent for longer than its lease is ended by the next draw (its allowance comes
back as its stored spend); a worker so ended finds its row gone from under it at its
next flush and stops (store/fences.LeaseFence.hold), as with a lost lease — so nothing it
still had in flight is counted twice against the cap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from swarm_tui.store.conn import StoreConnection, dialect_of

COMMITTED = ("CASE WHEN ended_at IS NOT NULL OR spent_usd > granted_usd THEN spent_usd "
             "ELSE granted_usd END")


@dataclass(frozen=True)
class Draw:
    granted: float      # added to this worker's allowance now (0: none)
    committed: float    # the run's committed spend after this draw, every worker counted
    mine: float         # this worker's part of it
    workers: int        # workers alive


async def draw_budget(conn: StoreConnection, run_id: str, worker: str, cap: float, *,
                      need: float, want: float, dead_after_s: float) -> Draw:
    """Add up to `want` USD to this worker's allowance — at least `need` (the call it
    waits to send) or nothing — and at most its fair share of what is left when others
    are drawing too (so no worker holds what another needs near the cap)."""
    now = time.time()
    await conn.execute("BEGIN IMMEDIATE")
    try:
        if dialect_of(conn) == "postgresql":
            # draws queue on a lock of their own, not on the run's row: a flush inserting
            # results holds its worker's row and then key-shares the run's row (the foreign
            # key), while this draw would hold the run's row and wait for that worker's
            # row — a deadlock (measured: the bench's workers stopped on it)
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(?))",
                               (f"swarm-tui budget {run_id}",))
        await conn.execute("UPDATE workers SET ended_at=? WHERE run_id=? AND worker<>? AND "
                           "ended_at IS NULL AND heartbeat_at < ?",
                           (now, run_id, worker, now - dead_after_s))
        async with conn.execute(
                f"SELECT COALESCE(SUM({COMMITTED}), 0), COUNT(CASE WHEN ended_at IS NULL "
                f"THEN 1 END), COALESCE(SUM(CASE WHEN worker=? THEN {COMMITTED} END), 0) "
                "FROM workers WHERE run_id=?", (worker, run_id)) as cur:
            row = await cur.fetchone()
        committed, alive, mine = float(row[0]), max(1, int(row[1])), float(row[2])
        left = max(0.0, cap - committed)
        grant = min(left, max(need, min(want, left / alive)))
        if grant < need or grant <= 0:
            grant = 0.0
        else:
            await conn.execute("UPDATE workers SET granted_usd = granted_usd + ? WHERE "
                               "run_id=? AND worker=?", (grant, run_id, worker))
        await conn.execute("COMMIT")
    except BaseException:
        await conn.execute("ROLLBACK")
        raise
    return Draw(grant, committed + grant, mine + grant, alive)


async def run_spend(conn: StoreConnection, run_id: str) -> tuple[float, float]:
    """(committed, spent) of the run's workers: what the ledger holds against the cap, and
    what their stored results cost."""
    async with conn.execute(f"SELECT COALESCE(SUM({COMMITTED}), 0), COALESCE(SUM(spent_usd), "
                            "0) FROM workers WHERE run_id=?", (run_id,)) as cur:
        row = await cur.fetchone()
    return (float(row[0]), float(row[1])) if row else (0.0, 0.0)
