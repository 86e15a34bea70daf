"""A run split into batches that worker processes lease (`run --workers N`, `worker`).

A worker leases the first batch that is neither done nor held: PostgreSQL hands out
different rows to concurrent workers with FOR UPDATE SKIP LOCKED; SQLite has one writer
at a time (BEGIN IMMEDIATE), which is the same guarantee. A lease carries the worker's
fencing token and an expiry that every flush of the worker renews (store/fences.py); a
batch whose holder died is leased again once its lease has expired, and only its tasks
without a stored result are sent again.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass

from swarm_tui.errors import UserError
from swarm_tui.store.conn import StoreConnection, dialect_of
from swarm_tui.store.target import DbTarget

BATCH_TASKS = 100   # small: a dead worker's batches are what may be paid twice
LEASE_S = 10.0      # renewed every flush (0.25 s); a worker silent this long has lost them
LEASE_ENV = "SWARM_TUI_LEASE_S"  # shorter: a dead worker's batches come back sooner
LIVE_WORKER_S = 5.0  # a worker beating this recently shares the run's concurrency


def lease_seconds() -> float:
    """The lease a worker takes; SWARM_TUI_LEASE_S overrides it (at least 1 s: four
    flushes must fit in it, or a busy worker would lose its own batches)."""
    try:
        return max(1.0, float(os.environ.get(LEASE_ENV) or LEASE_S))
    except ValueError:
        return LEASE_S


@dataclass(frozen=True)
class Lease:
    batch: int
    first_seq: int
    last_seq: int


async def split_run(conn: StoreConnection, run_id: str, total: int,
                    size: int = BATCH_TASKS) -> int:
    """The run's batches (seq ranges), written once when the run is created; the run is
    then nobody's: its liveness is its workers' heartbeats (claims.owner_alive)."""
    n = math.ceil(total / size)
    await conn.executemany(
        "INSERT INTO batches (run_id, batch, first_seq, last_seq) VALUES (?, ?, ?, ?)",
        [(run_id, b, b * size, min(total, (b + 1) * size) - 1) for b in range(n)])
    await conn.execute("UPDATE runs SET owner_token=NULL, pid=NULL, host=NULL, lock_path=NULL "
                       "WHERE id=?", (run_id,))
    await conn.commit()
    return n


async def newest_split_run(conn: StoreConnection, db_target: DbTarget) -> str:
    """The newest running run that workers can join."""
    async with conn.execute(
            "SELECT id FROM runs r WHERE status='running' AND EXISTS (SELECT 1 FROM batches b "
            "WHERE b.run_id = r.id AND b.done_at IS NULL) ORDER BY started_at DESC LIMIT 1"
            ) as cur:
        row = await cur.fetchone()
    if row is None:
        raise UserError(f"database {db_target}: no running run split into batches (start one "
                        "with `swarm-tui run ... --workers N`)")
    return str(row[0])


async def cancel_split_run(conn: StoreConnection, run_id: str) -> bool:
    """A worker cancelled (watch --write): the run is cancelled; `resume` finishes it.
    True for the one worker that marked it."""
    cur = await conn.execute("UPDATE runs SET status='cancelled', finished_at=? WHERE id=? "
                             "AND status='running'", (time.time(), run_id))
    await conn.commit()
    return cur.rowcount == 1


async def has_batches(conn: StoreConnection, run_id: str) -> bool:
    async with conn.execute("SELECT COUNT(*) FROM batches WHERE run_id=?", (run_id,)) as cur:
        row = await cur.fetchone()
    return bool(row and row[0])


async def lease_batch(conn: StoreConnection, run_id: str, worker: str, token: str,
                      lease_s: float = LEASE_S) -> Lease | None:
    now = time.time()
    pg = dialect_of(conn) == "postgresql"
    skip_locked = " FOR UPDATE SKIP LOCKED" if pg else ""
    # a lease cannot be renewed while the server is down: one that ran out during a
    # restart runs again from the server's start (its holder is likely alive and
    # reconnecting — taking its batches then re-sent what it had already been answered)
    expiry = ("GREATEST(expires_at, EXTRACT(EPOCH FROM pg_postmaster_start_time()) + ?)"
              if pg else "expires_at + 0 * ?")
    await conn.execute("BEGIN IMMEDIATE")
    try:
        async with conn.execute(
                "SELECT batch, first_seq, last_seq, worker FROM batches WHERE run_id=? AND "
                f"done_at IS NULL AND (expires_at IS NULL OR {expiry} < ?) ORDER BY batch "
                f"LIMIT 1{skip_locked}", (run_id, lease_s, now)) as cur:
            found = await cur.fetchone()
        row = found[:3] if found is not None else None
        if found is not None:
            await conn.execute(
                "UPDATE batches SET worker=?, token=?, expires_at=?, leases = leases + 1 "
                "WHERE run_id=? AND batch=?", (worker, token, now + lease_s, run_id, found[0]))
            if found[3] is not None:
                await _book_holders_lost_sends(conn, run_id, found[3], found[1], found[2])
        await conn.execute("COMMIT")
    except BaseException:
        await conn.execute("ROLLBACK")
        raise
    if row is None and pg:
        await _cut_off_stuck_holders(conn, run_id, worker, expiry, lease_s, now)
    return Lease(*row) if row is not None else None


async def _cut_off_stuck_holders(conn: StoreConnection, run_id: str, worker: str,
                                 expiry: str, lease_s: float, now: float) -> None:
    """A batch whose lease ran out a whole lease ago yet cannot be leased (SKIP LOCKED
    skips it) is locked by a holder stopped in the middle of a statement: a pipelined
    write has no Sync yet, so no server timeout ends it (idle-in-transaction covers only
    a session between statements), and its locks would hold the batch for good. The
    holder's session (its heartbeat names it) is ended; the holder, if it wakes, finds
    the lease gone and stores what it has unfenced."""
    async with conn.execute(
            "SELECT DISTINCT w.live_json FROM batches b JOIN workers w ON w.run_id = b.run_id "
            "AND w.worker = b.worker WHERE b.run_id=? AND b.done_at IS NULL AND b.worker <> ? "
            f"AND {expiry.replace('expires_at', 'b.expires_at')} < ?",
            (run_id, worker, lease_s, now - lease_s)) as cur:
        beats = [r[0] for r in await cur.fetchall()]
    for beat in beats:
        try:
            pid = json.loads(beat or "{}").get("db_pid")
        except ValueError:
            continue
        if isinstance(pid, int):
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ? AND "
                "pid <> pg_backend_pid() AND usename = current_user AND application_name "
                "LIKE 'swarm-tui%'", (pid,))


async def _book_holders_lost_sends(conn: StoreConnection, run_id: str, holder: str,
                                   first: int, last: int) -> None:
    """A batch taken over after its lease ran out: what its last holder had in flight
    in it at its last heartbeat is booked as sent, answer lost (a kill -9's re-sends then
    count as SENT MORE THAN ONCE; a holder that was only stopped and writes its answers
    later replaces these rows — store/lost_sends.py)."""
    from swarm_tui.store.lost_sends import book_lost_sends

    async with conn.execute("SELECT live_json FROM workers WHERE run_id=? AND worker=?",
                            (run_id, holder)) as cur:
        beat = await cur.fetchone()
    if beat is not None:
        await book_lost_sends(conn, run_id, holder, beat[0], range(first, last + 1))


async def batches_left(conn: StoreConnection, run_id: str) -> int:
    """Batches not done yet (held by someone or free)."""
    async with conn.execute("SELECT COUNT(*) FROM batches WHERE run_id=? AND done_at IS NULL",
                            (run_id,)) as cur:
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def join_run(conn: StoreConnection, run_id: str, worker: str, token: str, host: str,
                   pid: int) -> None:
    now = time.time()
    await conn.execute(
        "INSERT INTO workers (run_id, worker, token, host, pid, started_at, heartbeat_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, worker) DO UPDATE SET "
        "token = excluded.token, started_at = excluded.started_at, "
        "heartbeat_at = excluded.heartbeat_at, ended_at = NULL",
        (run_id, worker, token, host, pid, now, now))
    await conn.commit()


async def beat_run(conn: StoreConnection, run_id: str) -> None:
    """The run's heartbeat (its liveness for watchers on other hosts), one short
    statement of its own, so no worker's flush holds the run's row."""
    await conn.execute("UPDATE runs SET heartbeat_at=? WHERE id=? AND status='running'",
                       (time.time(), run_id))
    await conn.commit()


async def live_workers(conn: StoreConnection, run_id: str) -> int:
    async with conn.execute(
            "SELECT COUNT(*) FROM workers WHERE run_id=? AND ended_at IS NULL AND "
            "heartbeat_at > ?", (run_id, time.time() - LIVE_WORKER_S)) as cur:
        row = await cur.fetchone()
    return max(1, int(row[0]) if row else 1)


async def budget_stop_run(conn: StoreConnection, run_id: str, quiet_s: float) -> bool:
    """A worker stopped at the run's cap: the run is stopped there once no worker is left
    (each ends before it asks, so of two ending at once the later one sees the other
    ended). A worker silent for `quiet_s` counts as gone; the other workers, if any, go
    on with the batches this one gave back and stop at the cap in turn."""
    now = time.time()
    cur = await conn.execute(
        "UPDATE runs SET status='budget_stopped', finished_at=?, heartbeat_at=?, "
        "wall_ms = (? - started_at) * 1000.0 WHERE id=? AND status='running' AND NOT EXISTS "
        "(SELECT 1 FROM workers WHERE run_id=? AND ended_at IS NULL AND heartbeat_at > ?)",
        (now, now, now, run_id, run_id, now - quiet_s))
    await conn.commit()
    return cur.rowcount == 1


async def finish_run(conn: StoreConnection, run_id: str) -> bool:
    """The last worker out marks the run finished (exactly one of them wins)."""
    now = time.time()
    cur = await conn.execute(
        "UPDATE runs SET status='finished', finished_at=?, heartbeat_at=?, "
        "wall_ms = (? - started_at) * 1000.0 WHERE id=? AND status='running' AND NOT EXISTS "
        "(SELECT 1 FROM batches WHERE run_id=? AND done_at IS NULL)",
        (now, now, now, run_id, run_id))
    await conn.commit()
    return cur.rowcount == 1
