"""The canary in the store: its state row, the audit log, and the analysis queries.

Every change is a compare-and-swap on `version`, so two processes acting at once
never both win; a running runner polls the row and follows it.
"""

from __future__ import annotations

import json
import time

from swarm_tui.core import canary as st
from swarm_tui.core.canary import BASELINE, CANDIDATE
from swarm_tui.core.record import record, replace
from swarm_tui.settings.sections import CanaryConfig
from swarm_tui.store.audited import CANARY_CREATE, CANARY_MOVE, on_server
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.control import actor_on, os_user
from swarm_tui.store.notify import CANARY, notify

_COLS = ("name, baseline, candidate, status, pct, stage_started_at, bake_started_at, "
         "passing_since, failures, version, updated_at")


@record(kw_only=True)
class ActionRecord:
    """One entry of the canary's audit log."""

    at: float
    action: str
    actor: str
    source: str
    from_pct: int | None
    to_pct: int | None
    from_status: str | None
    to_status: str | None
    reason: str | None
    metrics: dict | None = None


async def read_state(conn: StoreConnection, name: str) -> st.CanaryState | None:
    async with conn.execute(f"SELECT {_COLS} FROM canary WHERE name=?", (name,)) as cur:
        row = await cur.fetchone()
    return st.CanaryState(*row) if row else None


async def peek_state(conn: StoreConnection, cfg: CanaryConfig) -> st.CanaryState:
    """The stored state, or what it would start as — without writing (read-only views)."""
    found = await read_state(conn, cfg.name)
    if found is not None:
        return found
    now = time.time()
    return st.initial(cfg.name, cfg.baseline, cfg.candidate, cfg.stages, now)


async def load_state(conn: StoreConnection, cfg: CanaryConfig, *, source: str = "cli",
                     now: float | None = None) -> st.CanaryState:
    """The canary's state, created at its first stage the first time it is seen."""
    found = await read_state(conn, cfg.name)
    if found is not None:
        return found
    now = time.time() if now is None else now
    fresh = st.initial(cfg.name, cfg.baseline, cfg.candidate, cfg.stages, now)
    reason = f"first seen: stages {cfg.stages}, mode {cfg.mode}"
    if on_server(conn):  # the row and its audit line by the server's function
        await conn.execute(
            f"SELECT {CANARY_CREATE}(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (fresh.name, fresh.baseline, fresh.candidate, fresh.status, fresh.pct,
             fresh.stage_started_at, fresh.bake_started_at, fresh.updated_at, os_user(),
             source, reason))
        return await read_state(conn, cfg.name) or fresh
    await conn.execute("BEGIN IMMEDIATE")
    try:
        await conn.execute(
            f"INSERT INTO canary ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (name) DO NOTHING",
            _row(fresh))
        await _audit(conn, fresh.name, now, st.START, os_user(), source, None, fresh,
                     reason, None)
        await conn.execute("COMMIT")
    except BaseException:
        await conn.execute("ROLLBACK")
        raise
    return await read_state(conn, cfg.name) or fresh


def _row(s: st.CanaryState) -> tuple:
    return (s.name, s.baseline, s.candidate, s.status, s.pct, s.stage_started_at,
            s.bake_started_at, s.passing_since, s.failures, s.version, s.updated_at)


async def _audit(conn: StoreConnection, name: str, now: float, action: str, actor: str,
                 source: str, before: st.CanaryState | None, after: st.CanaryState,
                 reason: str | None, metrics_json: str | None) -> None:
    await conn.execute(
        "INSERT INTO canary_actions (name, at, action, actor, source, from_pct, to_pct, "
        "from_status, to_status, reason, metrics_json) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (name, now, action, actor_on(conn, actor), source, before.pct if before else None,
         after.pct, before.status if before else None, after.status, reason, metrics_json))


async def save(conn: StoreConnection, before: st.CanaryState, after: st.CanaryState,
               *, action: str | None = None, actor: str = "", source: str = "",
               reason: str | None = None, metrics_json: str | None = None) -> bool:
    """Write `after` if nobody changed the row since `before` was read; audit an action.
    False: lost the race (the caller re-reads)."""
    new = replace(after, version=before.version + 1)
    if on_server(conn):  # compare-and-swap, audit line and notification in one call
        async with conn.execute(
                f"SELECT {CANARY_MOVE}(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (before.name, before.version, new.status, new.pct, new.stage_started_at,
                 new.bake_started_at, new.passing_since, new.failures, new.updated_at,
                 action, actor, source, before.pct, before.status, reason,
                 metrics_json)) as cur:
            row = await cur.fetchone()
        return bool(row and row[0])
    await conn.execute("BEGIN IMMEDIATE")
    try:
        cur = await conn.execute(
            "UPDATE canary SET status=?, pct=?, stage_started_at=?, bake_started_at=?, "
            "passing_since=?, failures=?, version=?, updated_at=? WHERE name=? AND version=?",
            (new.status, new.pct, new.stage_started_at, new.bake_started_at, new.passing_since,
             new.failures, new.version, new.updated_at, before.name, before.version))
        won = cur.rowcount == 1
        if won and action is not None:
            await _audit(conn, before.name, new.updated_at, action, actor, source, before, new,
                         reason, metrics_json)
        if won:  # every process following this canary looks now, not at its next poll
            await notify(conn, CANARY, before.name)
        await conn.execute("COMMIT")
    except BaseException:
        await conn.execute("ROLLBACK")
        raise
    return won


async def figure_rows(conn: StoreConnection, cfg: CanaryConfig, since: float,
                      until: float | None = None) -> tuple[list[tuple], list[tuple]]:
    """(results, calls) of both buckets ended since `since` (and by `until`): the rows the
    canary's figures are made of (canary/stored.py evaluates them). A bucket is its
    gateway: results of runs without this canary on the baseline gateway are baseline
    traffic too (same gateway, same conditions)."""
    end = 2.0**62 if until is None else until
    async with conn.execute(
            "SELECT bucket, state, latency_ms, ttft_ms, tokens_in, tokens_out, cost_usd "
            "FROM results WHERE finished_at >= ? AND finished_at <= ? AND state != 'cancelled' "
            "AND ((bucket=? AND gateway=?) OR (bucket=? AND gateway=?))",
            (since, end, BASELINE, cfg.baseline, CANDIDATE, cfg.candidate)) as cur:
        results = [tuple(r) for r in await cur.fetchall()]
    async with conn.execute(
            "SELECT CASE gateway WHEN ? THEN ? ELSE ? END, outcome, error_class FROM attempts "
            "WHERE sent_at >= ? AND sent_at + COALESCE(latency_ms, 0) / 1000.0 <= ? "
            "AND outcome != 'cancelled' AND gateway IN (?, ?)",
            (cfg.candidate, CANDIDATE, BASELINE, since, end, cfg.baseline,
             cfg.candidate)) as cur:
        calls = [tuple(r) for r in await cur.fetchall()]
    return results, calls


async def moves_until(conn: StoreConnection, name: str, at: float) -> list[tuple]:
    """(at, to_pct, to_status) of the canary's audited actions by `at`, oldest first."""
    async with conn.execute(
            "SELECT at, to_pct, to_status FROM canary_actions "
            "WHERE name=? AND at <= ? ORDER BY id", (name, at)) as cur:
        return [tuple(r) for r in await cur.fetchall()]


async def history(conn: StoreConnection, name: str, limit: int = 50,
                  until: float | None = None) -> list[ActionRecord]:
    async with conn.execute(
            "SELECT at, action, actor, source, from_pct, to_pct, from_status, to_status, "
            "reason, metrics_json FROM canary_actions WHERE name=? AND at <= ? "
            "ORDER BY id DESC LIMIT ?",
            (name, 2.0**62 if until is None else until, limit)) as cur:
        rows = list(await cur.fetchall())
    return [ActionRecord(at=r[0], action=r[1], actor=r[2], source=r[3], from_pct=r[4],
                         to_pct=r[5], from_status=r[6], to_status=r[7], reason=r[8],
                         metrics=json.loads(r[9]) if r[9] else None) for r in rows]
