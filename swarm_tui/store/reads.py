"""Read-only queries behind `watch`, replays and the detail view: the run's last pause
command, its stored log, the executor's live figures, one task in full, its keys."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from swarm_tui.core.states import KeyState
from swarm_tui.store.conn import StoreConnection

if TYPE_CHECKING:
    from swarm_tui.core.records import KeyRow

ATTEMPT_COLS = ("number", "model", "key_fp", "queue_ms", "latency_ms", "ttft_ms",
                "status_code", "error_class", "error_message", "retry_wait_s", "retry_detail",
                "outcome")


async def last_pause_command(conn: StoreConnection, run_id: str) -> str | None:
    """`pause` or `resume`, whichever was queued last (None: neither)."""
    async with conn.execute(
            "SELECT command FROM control WHERE run_id=? AND command IN ('pause', 'resume') "
            "ORDER BY id DESC LIMIT 1", (run_id,)) as cur:
        row = await cur.fetchone()
    return row[0] if row else None


async def canary_judged_lag(conn: StoreConnection, canary: str) -> float | None:
    """The loop lag the executors of this canary's running runs judged its stage with
    (the most of them; None: no executor running, or none has judged yet)."""
    async with conn.execute("SELECT id, config_json FROM runs WHERE status='running'") as cur:
        running = [run_id for run_id, raw in await cur.fetchall()
                   if raw and json.loads(raw).get("canary") == canary]
    lags = [lag for run_id in running
            if (lag := (await live_figures(conn, run_id)).get("canary_lag_ms")) is not None]
    return max(lags) if lags else None


async def live_figures(conn: StoreConnection, run_id: str) -> dict[str, Any]:
    """The executor's heartbeat figures: in_flight, concurrency, paused, retrying — or, for
    a run its workers execute, theirs added up (store/leases.py)."""
    async with conn.execute("SELECT live_json FROM runs WHERE id=?", (run_id,)) as cur:
        row = await cur.fetchone()
    if row and row[0]:
        return json.loads(row[0])
    async with conn.execute("SELECT live_json FROM workers WHERE run_id=? AND ended_at IS NULL "
                            "AND live_json IS NOT NULL", (run_id,)) as cur:
        parts = [json.loads(r[0]) for r in await cur.fetchall()]
    return merge_live(parts)


def merge_live(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Several workers' heartbeat figures as one executor's."""
    if not parts:
        return {}

    def most(key: str) -> Any:
        values = [p[key] for p in parts if p.get(key) is not None]
        return max(values) if values else None

    return {"in_flight": sum(p.get("in_flight", 0) for p in parts),
            "concurrency": sum(p.get("concurrency", 0) for p in parts),
            "paused": all(p.get("paused", False) for p in parts),
            "retrying": sum(p.get("retrying", 0) for p in parts),
            "lag_p95_ms": most("lag_p95_ms"), "run_lag_p95_ms": most("run_lag_p95_ms"),
            "run_lag_max_ms": most("run_lag_max_ms"), "canary_lag_ms": most("canary_lag_ms"),
            "client_bound": any(p.get("client_bound", False) for p in parts),
            "agents": [a for p in parts for a in p.get("agents", [])],
            "workers": len(parts)}


async def log_rows(conn: StoreConnection, run_id: str, limit: int = 100
                   ) -> tuple[list[tuple], list[tuple]]:
    """(failed attempts: sent_at, task_id, number, error_class, status_code, retry_wait_s,
    error_message), (events: at, kind, detail) — the newest `limit` of each."""
    async with conn.execute(
            "SELECT sent_at, t.task_id, number, error_class, status_code, retry_wait_s, "
            "error_message FROM attempts a JOIN tasks t ON t.run_id=a.run_id AND t.seq=a.seq "
            "WHERE a.run_id=? AND outcome='error' ORDER BY sent_at DESC LIMIT ?",
            (run_id, limit)) as cur:
        errs = [tuple(r) for r in await cur.fetchall()]
    async with conn.execute("SELECT at, kind, detail_json FROM events WHERE run_id=? "
                            "ORDER BY at DESC LIMIT ?", (run_id, limit)) as cur:
        events = [tuple(r) for r in await cur.fetchall()]
    return errs, events


async def task_json(conn: StoreConnection, run_id: str, seq: int) -> str | None:
    """What was asked of one task: its workload line as stored."""
    async with conn.execute("SELECT task_json FROM tasks WHERE run_id=? AND seq=?",
                            (run_id, seq)) as cur:
        row = await cur.fetchone()
    return row[0] if row is not None else None


async def task_detail_row(conn: StoreConnection, run_id: str, seq: int
                          ) -> tuple[tuple | None, list[dict[str, Any]]]:
    """One task's stored result joined with what was asked, and its attempts in order."""
    async with conn.execute(
            "SELECT r.seq, r.task_id, r.state, r.model, r.gateway, r.bucket, r.key_fp, "
            "t.task_json, r.latency_ms, r.ttft_ms, r.queue_ms, r.tokens_in, r.tokens_out, "
            "r.cost_usd, r.error_class, r.error_message, r.response_text "
            "FROM task_results r JOIN tasks t ON t.run_id=r.run_id AND t.seq=r.seq "
            "WHERE r.run_id=? AND r.seq=?", (run_id, seq)) as cur:
        row = await cur.fetchone()
    if row is None:
        return None, []
    async with conn.execute(
            f"SELECT {', '.join(ATTEMPT_COLS)} FROM attempts WHERE run_id=? AND seq=? "
            "ORDER BY number", (run_id, seq)) as cur:
        attempts = [dict(zip(ATTEMPT_COLS, a, strict=True)) for a in await cur.fetchall()]
    return tuple(row), attempts


# The gravest state a key has in any process of the run: one worker's 401 disabled it.
_STATE_RANK = {state: rank for rank, state in enumerate(KeyState)}
_LIVE_ROW_S = 5.0  # a process's row older than its newest one by this: it is gone


def _one_row_per_key(rows: Iterable[tuple], key_cols: int) -> list[tuple]:
    """A key's rows, one per process that used it (a run's workers: store/writer.py),
    as one row: counters added up; its state the gravest, cooling until the latest, its
    last use the latest; calls in flight only of the processes still storing theirs.
    Rows are (key…, label, source, state, cooling_until, reason, in_flight, calls,
    rate_limited, errors, [tokens_in, tokens_out, last_used,] updated_at)."""
    groups: dict[tuple, list[tuple]] = {}
    for r in rows:
        groups.setdefault(tuple(r[:key_cols]), []).append(r)
    out = []
    for key, group in groups.items():
        if len(group) == 1:
            out.append(group[0][:-1])
            continue
        newest = max(r[-1] for r in group)
        first = group[0]
        k = key_cols
        state = max((r[k + 2] for r in group), key=lambda s: _STATE_RANK.get(s, 0))
        reason = next((r[k + 4] for r in group if r[k + 2] == state and r[k + 4]), None)
        until = max((r[k + 3] for r in group if r[k + 3] is not None), default=None)
        in_flight = sum(r[k + 5] for r in group if r[-1] >= newest - _LIVE_ROW_S)
        with_last_use = len(first) - 1 > k + 9  # tokens and last use: the latest use
        summed = range(k + 6, len(first) - (2 if with_last_use else 1))
        counters: list[float | None] = [sum(r[i] for r in group) for i in summed]
        if with_last_use:  # None where a worker has not used the key yet
            counters.append(max((r[-2] for r in group if r[-2] is not None), default=None))
        out.append((*key, first[k], first[k + 1], state, until, reason, in_flight,
                    *counters))
    return out


async def stored_keys(conn: StoreConnection, run_id: str) -> tuple[KeyRow, ...]:
    """The run's keys as its writer — each of its workers — last stored them."""
    async with conn.execute(
            "SELECT gateway, fingerprint, label, source, state, cooling_until, reason, "
            "in_flight, calls, rate_limited, errors, tokens_in, tokens_out, last_used, "
            "updated_at FROM key_state WHERE run_id=? ORDER BY gateway, rowid",
            (run_id,)) as cur:
        rows = await cur.fetchall()
    from swarm_tui.core.records import KeyRow  # here: `report` and `runs` build none

    return tuple(KeyRow(*row) for row in _one_row_per_key(rows, 2))


async def call_rows(conn: StoreConnection, run_id: str, chunk: int = 5_000
                    ) -> AsyncIterator[list[tuple]]:
    """(seq, number, outcome, sent_at, error_class, status_code, retry_wait_s,
    error_message, retry_detail, model, gateway, key_fp, latency_ms, tokens_in, tokens_out)
    of every call of the run, in the order stored, a chunk at a time (a replay's timeline
    keeps a few fields of each: replay/timeline.py)."""
    async with conn.execute(
            "SELECT seq, number, outcome, sent_at, error_class, status_code, retry_wait_s, "
            "error_message, retry_detail, model, gateway, key_fp, latency_ms, tokens_in, "
            "tokens_out "
            "FROM attempts WHERE run_id=? ORDER BY id", (run_id,)) as cur:
        while rows := await cur.fetchmany(chunk):
            yield [tuple(r) for r in rows]


async def result_rows(conn: StoreConnection, run_id: str, chunk: int = 5_000
                      ) -> AsyncIterator[list[tuple]]:
    """RESULT_FIELDS of every result of the run, in the order stored, a chunk at a time
    (a replay's timeline keeps them as columns: the rows are never all held at once)."""
    async with conn.execute(f"SELECT {', '.join(RESULT_FIELDS)} FROM results WHERE run_id=? "
                            "ORDER BY rowid", (run_id,)) as cur:
        while rows := await cur.fetchmany(chunk):
            yield [tuple(r) for r in rows]


KeyCounts = dict[tuple[str, str], tuple]  # (gateway, fp) -> (calls, in flight, 429s, errors,
# tokens in, tokens out, last used)


async def keys_at(conn: StoreConnection, run_id: str, at: float,
                  counted: KeyCounts | None = None) -> tuple[KeyRow, ...]:
    """The run's keys as they were at `at` (a replay): each key's state from its last
    change by then (key_changes), its counters from the attempts sent by then, counted as
    the key pool counts them (a call at its send; errors, 429s and tokens at its answer) —
    `counted` when the caller has them (a replay's timeline), else read here.
    A run stored before key changes were kept shows its keys' last state."""
    keys = await stored_keys(conn, run_id)
    async with conn.execute(
            "SELECT gateway, fingerprint, worker, state, cooling_until, reason FROM key_changes "
            "WHERE run_id=? AND at <= ? ORDER BY at", (run_id, at)) as cur:
        changes = await cur.fetchall()
    async with conn.execute("SELECT 1 FROM key_changes WHERE run_id=? LIMIT 1",
                            (run_id,)) as cur:
        kept = await cur.fetchone() is not None
    last: dict[tuple, tuple] = {}
    for gw, fp, worker, state, until, reason in changes:
        last[(gw, fp, worker)] = (state, until, reason)
    if counted is None:
        counted = await _key_counts(conn, run_id, at)
    from swarm_tui.core.records import KeyRow

    out = []
    for k in keys:
        if kept:
            seen = [v for (gw, fp, _w), v in last.items()
                    if gw == k.gateway and fp == k.fingerprint]
            state, until, reason = (max(seen, key=lambda v: _STATE_RANK.get(v[0], 0))
                                    if seen else (KeyState.ACTIVE, None, None))
        else:
            state, until, reason = k.state, k.cooling_until, k.reason
        if state == KeyState.COOLING and until is not None and until <= at:
            state, until, reason = KeyState.ACTIVE, None, None  # its cooldown was over by then
        calls, in_flight, limited, errors, t_in, t_out, used = counted.get(
            (k.gateway, k.fingerprint), (0, 0, 0, 0, 0, 0, None))
        out.append(KeyRow(k.gateway, k.fingerprint, k.label, k.source, state, until, reason,
                          int(in_flight or 0), int(calls), int(limited or 0), int(errors or 0),
                          int(t_in or 0), int(t_out or 0), used))
    return tuple(out)


async def _key_counts(conn: StoreConnection, run_id: str, at: float) -> KeyCounts:
    end = ATTEMPT_END
    async with conn.execute(
            f"SELECT gateway, key_fp, COUNT(*), SUM(CASE WHEN {end} > ? THEN 1 ELSE 0 END), "
            f"SUM(CASE WHEN {end} <= ? AND status_code = 429 THEN 1 ELSE 0 END), "
            f"SUM(CASE WHEN {end} <= ? AND outcome = 'error' THEN 1 ELSE 0 END), "
            f"SUM(CASE WHEN {end} <= ? AND outcome = 'ok' THEN tokens_in ELSE 0 END), "
            f"SUM(CASE WHEN {end} <= ? AND outcome = 'ok' THEN tokens_out ELSE 0 END), "
            "MAX(sent_at) FROM attempts WHERE run_id=? AND sent_at <= ? AND key_fp IS NOT NULL "
            "GROUP BY gateway, key_fp", (at, at, at, at, at, run_id, at)) as cur:
        return {(r[0], r[1]): r[2:] for r in await cur.fetchall()}


async def attempt_dicts(conn: StoreConnection, run_id: str, cols: Sequence[str]
                        ) -> AsyncGenerator[tuple[int, dict[str, Any]], None]:
    """(seq, attempt as a dict of `cols`) for every attempt of the run, in order."""
    async with conn.execute(f"SELECT seq, {', '.join(cols)} FROM attempts WHERE run_id=? "
                            "ORDER BY seq, number, id", (run_id,)) as cur:
        async for r in cur:
            yield r[0], dict(zip(cols, r[1:], strict=True))


async def task_dicts(conn: StoreConnection, run_id: str, cols: Sequence[str]
                     ) -> AsyncGenerator[tuple[dict[str, Any], dict[str, Any]], None]:
    """Every task of the run, by seq: its result (`task_results` columns) and what was
    asked (the workload line as stored: prompt, user_id, model, metadata, …)."""
    select = ", ".join(f"r.{c}" for c in cols)
    async with conn.execute(f"SELECT {select}, t.task_json FROM task_results r JOIN tasks t "
                            "ON t.run_id = r.run_id AND t.seq = r.seq WHERE r.run_id=? "
                            "ORDER BY r.seq", (run_id,)) as cur:
        async for r in cur:
            yield dict(zip(cols, r[:-1], strict=True)), json.loads(r[-1])


async def live_key_rows(conn: StoreConnection, fresh_s: float) -> list[tuple]:
    """Key rows of swarms alive right now (their heartbeat refreshed them within
    `fresh_s`): run_id, gateway, fingerprint, label, source, state, cooling_until, reason,
    in_flight, calls, rate_limited, errors."""
    import time

    async with conn.execute(
            "SELECT run_id, gateway, fingerprint, label, source, state, cooling_until, reason, "
            "in_flight, calls, rate_limited, errors, updated_at FROM key_state WHERE "
            "updated_at >= ?", (time.time() - fresh_s,)) as cur:
        return _one_row_per_key(await cur.fetchall(), 3)


# -- a run followed incrementally (watch / replay): rows newer than the last one read ----
# `+run_id` keeps SQLite on the rowid range (the newest rows only); without it the planner
# may take the (run_id, seq) index and visit every row of the run on every tick.

async def task_list(conn: StoreConnection, run_id: str) -> list[tuple]:
    """(seq, task_id, model, bucket) of every task, as routed at the start."""
    async with conn.execute("SELECT seq, task_id, model, bucket FROM tasks WHERE run_id=? "
                            "ORDER BY seq", (run_id,)) as cur:
        return [tuple(r) for r in await cur.fetchall()]


RESULT_FIELDS = ("rowid", "seq", "state", "model", "bucket", "latency_ms", "ttft_ms",
                 "tokens_in", "tokens_out", "cost_usd", "usage_estimated", "attempts",
                 "error_class", "finished_at", "gateway")


def _limited(sql: str, params: tuple, limit: int | None) -> tuple[str, tuple]:
    return (sql, params) if limit is None else (f"{sql} LIMIT ?", (*params, limit))


async def results_after(conn: StoreConnection, run_id: str, after: int,
                        limit: int | None = None, until: float | None = None) -> list[tuple]:
    """Results stored after rowid `after` (0: all of the run's), oldest first; at most
    `limit` of them; with `until`, only those finished by then (a replay at a moment)."""
    cols = ", ".join(RESULT_FIELDS)
    sql = (f"SELECT {cols} FROM results WHERE run_id=?" if not after else
           f"SELECT {cols} FROM results WHERE rowid > ? AND +run_id=?")
    params: tuple = (run_id,) if not after else (after, run_id)
    if until is not None:
        sql, params = sql + " AND finished_at <= ?", (*params, until)
    async with conn.execute(*_limited(sql + " ORDER BY rowid", params, limit)) as cur:
        return [tuple(r) for r in await cur.fetchall()]


async def attempts_after(conn: StoreConnection, run_id: str, after: int,
                         limit: int | None = None, until: float | None = None) -> list[tuple]:
    """(id, seq, number, outcome, sent_at, error_class, status_code, retry_wait_s,
    error_message, retry_detail, model, gateway, latency_ms, ttft_ms) of attempts stored after id
    `after`, oldest first; at most `limit` of them."""
    cols = ("id, seq, number, outcome, sent_at, error_class, status_code, retry_wait_s, "
            "error_message, retry_detail, model, gateway, latency_ms, ttft_ms")
    sql = (f"SELECT {cols} FROM attempts WHERE run_id=?" if not after else
           f"SELECT {cols} FROM attempts WHERE id > ? AND +run_id=?")
    params: tuple = (run_id,) if not after else (after, run_id)
    if until is not None:  # answered by then
        sql, params = sql + f" AND {ATTEMPT_END} <= ?", (*params, until)
    async with conn.execute(*_limited(sql + " ORDER BY id", params, limit)) as cur:
        return [tuple(r) for r in await cur.fetchall()]


# when an attempt's answer (or failure) came: its send plus its latency
ATTEMPT_END = "(sent_at + COALESCE(latency_ms, 0) / 1000.0)"


async def events_after(conn: StoreConnection, run_id: str, after: int,
                       until: float | None = None) -> list[tuple]:
    """(id, at, kind, detail) of the run's events stored after id `after` (by `until`)."""
    sql = "SELECT id, at, kind, detail_json FROM events WHERE id > ? AND run_id=?"
    params: tuple = (after, run_id)
    if until is not None:
        sql, params = sql + " AND at <= ?", (*params, until)
    async with conn.execute(sql + " ORDER BY id", params) as cur:
        return [tuple(r) for r in await cur.fetchall()]
