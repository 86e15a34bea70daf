"""The one writer: consumes engine events, commits in batches, keeps the heartbeat.

The engine only appends tuples to in-memory lists (no await, no I/O); a background
task commits them at most every `flush_interval` seconds or as soon as
`max_rows` are pending. A crash loses at most the rows of the last window.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
import time
from pathlib import Path

import aiosqlite

from swarm_tui.engine import events as ev
from swarm_tui.engine.live import key_rows
from swarm_tui.engine.runner import SwarmRunner
from swarm_tui.engine.state import Agent, Attempt
from swarm_tui.errors import UserError
from swarm_tui.store.db import db_error

INSERT_RESULT = """
INSERT OR REPLACE INTO results (run_id, seq, state, model, gateway, bucket, key_fp, attempts,
    tokens_in, tokens_out, cached_in, usage_estimated, cost_usd, latency_ms, ttft_ms, queue_ms,
    status_code, error_class, error_message, response_text, finished_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
INSERT_ATTEMPT = """
INSERT OR REPLACE INTO attempts (run_id, seq, number, model, gateway, key_fp, sent_at, queue_ms,
    latency_ms, ttft_ms, status_code, error_class, error_message, retry_wait_s, tokens_in,
    tokens_out, cached_in, outcome)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
UPSERT_KEY = """
INSERT OR REPLACE INTO key_state (run_id, gateway, fingerprint, label, source, state,
    cooling_until, reason, in_flight, calls, rate_limited, errors, tokens_in, tokens_out,
    last_used, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
INSERT_EVENT = "INSERT INTO events (run_id, at, kind, actor, detail_json) VALUES (?, ?, ?, ?, ?)"
CONTROL_POLL_S = 0.5


class WriterStats:
    __slots__ = ("flush_ms_max", "flush_ms_total", "flushes", "max_pending", "rows")

    def __init__(self) -> None:
        self.flushes = 0
        self.rows = 0
        self.max_pending = 0
        self.flush_ms_max = 0.0
        self.flush_ms_total = 0.0


class StoreWriter:
    def __init__(self, conn: aiosqlite.Connection, path: Path, run_id: str, runner: SwarmRunner,
                 *, flush_interval: float = 0.25, max_rows: int = 5000,
                 heartbeat_s: float = 1.0) -> None:
        self.conn = conn
        self.path = path
        self.run_id = run_id
        self.runner = runner
        self.flush_interval = flush_interval
        self.max_rows = max_rows
        self.heartbeat_s = heartbeat_s
        self.stats = WriterStats()
        self.error: str | None = None
        self._tasks: list[tuple] = []
        self._attempts: list[tuple] = []
        self._events: list[tuple] = []
        self._kick = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._last_poll = 0.0
        self._last_beat = 0.0
        runner.consumers.append(self.on_event)

    # -- the consumer: called inline by the engine, so only appends ------------------------
    def on_event(self, e: ev.Event) -> None:
        kind = e.kind
        if kind in ev.FINAL_KINDS:
            agent = e.agent
            assert agent is not None
            if e.attempt is not None:
                self._attempts.append(self._attempt_row(agent, e.attempt))
            self._tasks.append(self._task_row(agent))
        elif kind == ev.RETRY_SCHEDULED:
            assert e.agent is not None and e.attempt is not None
            self._attempts.append(self._attempt_row(e.agent, e.attempt))
        elif kind == ev.CONTROL:
            self._events.append((self.run_id, time.time(), "control", None, e.detail))
        else:
            return
        pending = len(self._tasks) + len(self._attempts)
        if pending > self.stats.max_pending:
            self.stats.max_pending = pending
        if pending >= self.max_rows:
            self._kick.set()

    def _task_row(self, a: Agent) -> tuple:
        finished = self.runner.started_wall + (a.finished_ms or 0.0) / 1000.0
        return (self.run_id, a.seq, a.state, a.model, a.gateway, a.bucket, a.key_fp,
                a.prior_attempts + len(a.attempts), a.tokens_in, a.tokens_out, a.cached_in,
                int(a.usage_estimated), a.cost_usd, a.latency_ms, a.ttft_ms, a.queue_ms,
                a.status_code, a.error_class, a.error_message, a.response_text, finished)

    def _attempt_row(self, a: Agent, x: Attempt) -> tuple:
        sent = self.runner.started_wall + x.started_ms / 1000.0
        return (self.run_id, a.seq, x.number, x.model, x.gateway, x.key_fp, sent, x.queue_ms,
                x.latency_ms, x.ttft_ms, x.status_code, x.error_class, x.error_message,
                x.retry_wait_s, x.tokens_in, x.tokens_out, x.cached_in, x.outcome)

    def _key_rows(self, now: float) -> list[tuple]:
        """Every key's state for `keys list` / watch: fingerprints and counters only."""
        return [(self.run_id, *dataclasses.astuple(k), now) for k in key_rows(self.runner.gateways)]

    def log_event(self, kind: str, detail_json: str | None = None,
                  actor: str | None = None) -> None:
        self._events.append((self.run_id, time.time(), kind, actor, detail_json))

    # -- the flushing task -----------------------------------------------------------------
    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self.flush_interval)
            self._kick.clear()
            await self.flush()
            if time.monotonic() - self._last_poll >= CONTROL_POLL_S:
                self._last_poll = time.monotonic()
                await self.apply_control()

    async def apply_control(self) -> None:
        """Commands another process (`watch --write`) queued for this run."""
        try:
            async with self.conn.execute(
                    "SELECT id, command, arg, actor FROM control "
                    "WHERE run_id=? AND done_at IS NULL ORDER BY id", (self.run_id,)) as cur:
                rows = list(await cur.fetchall())
            for cid, command, arg, actor in rows:
                ok = apply_command(self.runner, command, arg)
                await self.conn.execute("UPDATE control SET done_at=? WHERE id=?",
                                        (time.time(), cid))
                self.log_event("control" if ok else "control_rejected",
                               f'{{"command": "{command}", "arg": "{arg or ""}"}}', actor)
        except sqlite3.Error as e:
            self.error = str(db_error(self.path, e))

    async def flush(self) -> None:
        tasks, attempts, events = self._tasks, self._attempts, self._events
        now = time.time()
        beat = now - self._last_beat >= self.heartbeat_s
        if not (tasks or attempts or events or beat):
            return
        self._tasks, self._attempts, self._events = [], [], []
        t0 = time.perf_counter()
        try:
            await self.conn.execute("BEGIN IMMEDIATE")
            try:
                if attempts:
                    await self.conn.executemany(INSERT_ATTEMPT, attempts)
                if tasks:
                    await self.conn.executemany(INSERT_RESULT, tasks)
                if events:
                    await self.conn.executemany(INSERT_EVENT, events)
                await self.conn.execute("UPDATE runs SET heartbeat_at=? WHERE id=?",
                                        (now, self.run_id))
                if beat:
                    await self.conn.executemany(UPSERT_KEY, self._key_rows(now))
                await self.conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    await self.conn.execute("ROLLBACK")
                raise
        except BaseException as e:
            # Put the rows back (a full disk or a cancelled flush must not lose results);
            # they go out with the next flush.
            self._tasks[:0], self._attempts[:0], self._events[:0] = tasks, attempts, events
            if not isinstance(e, sqlite3.Error):
                raise
            self.error = str(db_error(self.path, e))
            return
        self.error = None
        self._last_beat = now
        ms = (time.perf_counter() - t0) * 1000.0
        st = self.stats
        st.flushes += 1
        st.rows += len(tasks) + len(attempts) + len(events)
        st.flush_ms_total += ms
        st.flush_ms_max = max(st.flush_ms_max, ms)

    async def close(self, status: str, summary_json: str | None = None) -> None:
        """Let the loop finish its flush, flush the rest, record how the session ended."""
        self._stopping = True
        self._kick.set()
        if self._loop_task is not None:
            await self._loop_task
        self._last_beat = 0.0
        await self.flush()
        if self.error:
            return
        try:
            await self.conn.execute(
                "UPDATE runs SET status=?, finished_at=?, heartbeat_at=?, "
                "wall_ms = wall_ms + ? WHERE id=?",
                (status, time.time(), time.time(), self.runner.wall_ms, self.run_id))
        except sqlite3.Error as e:
            self.error = str(db_error(self.path, e))


def apply_command(runner: SwarmRunner, command: str, arg: str | None) -> bool:
    """pause | resume | cancel | concurrency N | cancel_agent SEQ | key_retire FP |
    key_enable FP. False: not understood (or no such key)."""
    from swarm_tui.gateway import keyops

    try:
        if command in ("key_retire", "key_enable") and arg:
            op = keyops.retire if command == "key_retire" else keyops.enable
            runner.emit(ev.CONTROL, detail=op(runner.gateways, arg))
            runner.wake()
            return True
        if command == "pause":
            runner.pause()
        elif command == "resume":
            runner.resume()
        elif command == "cancel":
            runner.cancel()
        elif command == "concurrency" and arg:
            runner.set_concurrency(int(arg))
        elif command == "cancel_agent" and arg:
            seq = int(arg)
            for agent in runner.agents:
                if agent.seq == seq:
                    runner.cancel_agent(agent.index)
        else:
            return False
    except (ValueError, UserError):
        return False
    return True
