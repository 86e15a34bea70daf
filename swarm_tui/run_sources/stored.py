"""A run read from the store: watched while another process executes it, or replayed."""

from __future__ import annotations

import dataclasses
import functools
import math
import sqlite3
import time
from typing import TYPE_CHECKING

from swarm_tui.core.plain import build
from swarm_tui.core.states import RunStatus, TaskState
from swarm_tui.engine.cost import CostReport
from swarm_tui.engine.snapshot import (
    LOG_LINES,
    KeyRow,
    LiveMetrics,
    Snapshot,
    TaskCell,
    metrics_snapshot,
)
from swarm_tui.errors import UserError
from swarm_tui.replay.timeline import Timeline, call_line, event_line
from swarm_tui.run_sources.base import RowObserver, TaskDetail
from swarm_tui.settings.loader import LoadedConfig
from swarm_tui.settings.sections import CanaryConfig
from swarm_tui.settings.view import ConfigView
from swarm_tui.store import reads
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.control import queue_command
from swarm_tui.store.db import db_error, open_db
from swarm_tui.store.notify import CANARY, CONTROL, ROWS, Listener
from swarm_tui.store.runs import RunRecord, get_run, get_settled_run, list_runs
from swarm_tui.store.target import DbTarget
from swarm_tui.workload import Task

if TYPE_CHECKING:
    from swarm_tui.canary.controller import CanaryView


def _session(run: RunRecord) -> tuple:
    """Who executes (or last executed) the run: a resume is another process, so another
    session (the claim token itself is cleared when a session ends)."""
    return (run.host, run.pid, run.owner_started)


class _Follow:
    """How far a reader has followed one executor's session of a run, and the metrics
    built from what it read."""

    def __init__(self, run: RunRecord, tasks: list[tuple],
                 timeline: Timeline | None = None) -> None:
        self.session = _session(run)
        self.status = run.status
        self.index = {seq: i for i, (seq, *_rest) in enumerate(tasks)}
        self.task_ids = [t[1] for t in tasks]
        self.ended_at: float | None = None  # the run's end (unix s); None while it runs
        self.started_at = run.started_at  # this reader's run clock is unix s less this
        if timeline is not None:  # a replay at a moment: the timeline's figures, drawn on
            self.metrics = timeline.display()
        else:
            self.metrics = LiveMetrics(clock=lambda: (self.ended_at or time.time())
                                       - run.started_at)
            for i, (seq, task_id, model, bucket) in enumerate(tasks):
                self.metrics.put_cell(i, TaskCell(seq, task_id, TaskState.QUEUED, model,
                                                   bucket, None, None, 0, None))
        self.buckets = [t[3] for t in tasks]
        self.working: set[int] = set()  # cells shown working from the executor's heartbeat
        self.results_at = self.attempts_at = self.events_at = 0
        self.ended = 0  # result rows read: tasks ended (cancelled ones too)
        self.final = False  # the run had ended when its rows were last read
        self.snapshot: Snapshot | None = None




_FINAL = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED})
TICK_ROWS = 1_000  # results per watch tick while a run executes (attempts: twice that)
QUIET_READ_S = 2.0  # PostgreSQL, nothing notified: a watcher still reads this often
FINAL_POLL_S = 1.0  # a watched run that ended: whether it was resumed, read this often


def _show_working(f: _Follow, agents: list[list]) -> None:
    """The executor's calls in flight (its heartbeat, a few times a second) as working
    cells in their agents' slots; a call gone from it since ended (its result row) or waits
    for a retry. A stored result always wins over a heartbeat older than it."""
    m = f.metrics
    now: dict[int, list] = {}
    for entry in agents:
        i = f.index.get(entry[0])
        cell = m.cells[i] if i is not None and i < len(m.cells) else None
        if i is not None and (cell is None or cell.state not in _FINAL):
            now[i] = entry
    for i in f.working - now.keys():  # first: the slots they free go to the new calls
        m.slot_off(i)
        cell = m.cells[i]
        if cell is not None and cell.state not in _FINAL:
            m.put_cell(i, TaskCell(cell.seq, cell.task_id, TaskState.RETRYING, cell.model,
                                    cell.bucket, None, None, cell.attempts, None))
    for i, (seq, state, sent, chars, model, *_) in now.items():
        cell = m.cells[i]
        m.put_cell(i, TaskCell(seq, f.task_ids[i], state, model, f.buckets[i], None, None,
                                cell.attempts if cell else 0, None))
        # the executor's send on the wall clock, read on this watcher's run clock (the
        # executor's own run clock starts later: preflight, a resume)
        m.slot_on(i, sent - f.started_at, functools.partial(int, chars))
    f.working = set(now)


class StoreSource:
    """A run read from the store: `watch` (another process writes it) or a replay."""

    kind = "watch"

    def __init__(self, db_target: DbTarget, run_id: str | None, *, write: bool = False,
                 replay: bool = False, cfg: LoadedConfig | None = None,
                 observer: RowObserver | None = None, at: float | None = None) -> None:
        self.db_target = db_target
        # a replay at a moment (unix seconds): only what had happened by then is read
        self.at = at
        self.observer = observer  # e.g. `watch --metrics-port`: fed each stored row once
        self._observed = (0, 0)  # (result rowid, attempt id) the observer has had
        self.cfg = cfg  # for the cost panel's price table (shipped table without it)
        self.run_id = run_id
        self.readonly = not write
        self.kind = "replay" if replay or at is not None else "watch"
        self.conn: StoreConnection | None = None
        self.record: RunRecord | None = None
        self.error: str | None = None
        self.active = False
        self.paused = False  # as last commanded through the control table
        self._follow: _Follow | None = None
        # PostgreSQL: told of writes to the run, so a quiet run is not read every tick
        self._listener: Listener | None = None
        self._read_at = -math.inf  # never read (monotonic time starts near 0 at boot)
        self._more_rows = False  # the last read stopped at its cap: more are stored
        self._seen: tuple[dict, tuple[KeyRow, ...], str, float | None] | None = None
        self._canary_view: CanaryView | None = None  # a replay's canary at its moment
        self._timeline: Timeline | None = None  # a replay's rows in time order
        self.moments_read: list[tuple[float, str]] | None = None

    async def open(self) -> None:
        if self.conn is not None:
            return
        self.conn = await open_db(self.db_target, create=False)
        try:
            if self.run_id is None:
                runs = [r for r in await list_runs(self.conn, 20)
                        if r.effective_status() == RunStatus.RUNNING]
                if not runs:
                    raise UserError(f"database {self.db_target}: no running run to watch "
                                    "(give a RUN_ID, see `swarm-tui runs`)")
                self.run_id = runs[0].id
            self.record = await get_run(self.conn, self.run_id, self.db_target)  # unknown: 1 line
            self.run_id = self.record.id  # `last` named the newest
            span = self.span()
            if self.at is not None and span is not None:  # `math.inf`: its end
                self.at = min(max(self.at, span[0]), span[1])
            if self.kind == "watch":
                self._listener = await Listener.open(self.db_target, (ROWS, CONTROL, CANARY))
        except BaseException:
            await self.close()  # aiosqlite's thread would keep the process alive
            raise

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    start = open
    shutdown = close

    def canary_live(self) -> tuple[CanaryConfig, CanaryView | None] | None:
        """A replay at a moment: the run's canary as it was then (nothing acts on it);
        otherwise None: another process's canary, read from and acted on in the store."""
        view = self._canary_view
        return (view.cfg, view) if view is not None and self.at is not None else None

    async def _canary_at(self, run: RunRecord, at: float) -> CanaryView | None:
        """The canary the run routed by (its stored config), as it stood at `at`."""
        from swarm_tui.canary.controller import view_at

        stored = (run.config.get("settings") or {}).get("canary")
        if not stored or not stored.get("enabled", True):
            return None
        assert self.conn is not None
        return await view_at(self.conn, build(CanaryConfig, stored), at)

    async def canary_act(self, action: str, arg: str | None, reason: str | None) -> bool:
        return False

    async def snapshot(self) -> Snapshot | None:
        """The run as stored, read incrementally: the rows stored since the last tick feed
        the same metrics a live run's events feed (engine/snapshot.py), so a tick costs the
        same at 1,000 or 100,000 tasks, and a finished replay costs nothing."""
        assert self.conn is not None and self.run_id is not None
        f = self._follow
        if f is not None and f.final and self.kind == "replay":
            return f.snapshot  # a finished run read to its end does not change
        if f is not None and f.final and time.monotonic() - self._read_at < FINAL_POLL_S:
            return f.snapshot  # a watched run that ended: looked at again now and then
            # (a resume is a new session, seen within FINAL_POLL_S)
        if self._quiet(f):  # nothing written since the last read: only time moved on
            assert f is not None and self._seen is not None and self.record is not None
            return self._build(f, self.record, *self._seen)
        if self.at is not None:
            return await self._snapshot_at(self.at)
        run, status = await get_settled_run(self.conn, self.run_id, self.db_target)
        self.record = run
        if f is None or f.session != _session(run) or (f.final and status != f.status):
            # first read, or another executor session (a resume, seen running or not —
            # it re-queued the cancelled tasks): read the run afresh
            f = self._follow = _Follow(run, await reads.task_list(self.conn, run.id))
        elif f.final and status != RunStatus.RUNNING:
            self._read_at = time.monotonic()
            return f.snapshot
        f.status = status
        self.active = status == RunStatus.RUNNING
        f.final = False  # set once this tick's snapshot is built (a failed read retries)
        f.ended_at = None if self.active else (run.finished_at or time.time())
        await self._read_new_rows(f, run.started_at)
        self.paused = await reads.last_pause_command(self.conn, self.run_id) == "pause"
        live = await reads.live_figures(self.conn, self.run_id) if self.active else {}
        _show_working(f, live.get("agents") or [])
        keys, _ = await self.keys()
        canary = "canary: off"
        canary_pct: float | None = None
        c = self._canary_name()
        if c is not None:
            from swarm_tui.store.canary import read_state

            state = await read_state(self.conn, c)
            if state is not None:
                canary = f"canary {state.pct}% {state.status}"
                canary_pct = state.pct
        self._seen = (live, keys, canary, canary_pct)
        self._read_at = time.monotonic()  # once read: a slow read still earns its quiet ticks
        return self._build(f, run, live, keys, canary, canary_pct)

    async def _snapshot_at(self, at: float) -> Snapshot:
        """The run as it was at `at`: its timeline moved there (rows read once per
        replay), the calls out then and the tasks waiting out a retry drawn on a copy."""
        assert self.conn is not None and self.run_id is not None
        if self._timeline is None or self.record is None:
            run, status = await get_settled_run(self.conn, self.run_id, self.db_target)
            self.record = run
            end = run.finished_at or run.heartbeat_at or time.time()
            ended = run.finished_at if status != RunStatus.RUNNING else None
            self._timeline = await Timeline.load(self.conn, run.id, run.started_at, end,
                                                 ended_at=ended)
            await self.moments()  # for the time bar, drawn with the first moment
        run, tl = self.record, self._timeline
        tl.move_to(at)
        f = self._follow = _Follow(run, [], timeline=tl)
        f.index, f.task_ids, f.buckets = tl.index, tl.task_ids, tl.buckets
        f.status = (RunStatus.RUNNING if at < (run.finished_at or run.heartbeat_at or 0)
                    else run.effective_status())
        f.ended_at = run.finished_at or time.time()
        self.active = False
        self._working_at(f, at)
        keys, _ = await self.keys()
        self._canary_view = await self._canary_at(run, at)
        canary, pct = "canary: off", None
        if self._canary_view is not None:
            canary, pct = self._canary_view.status_line(now=at), self._canary_view.state.pct
        snap = self._build(f, run, {}, keys, canary, pct)
        if self._canary_view is not None:
            snap = f.snapshot = dataclasses.replace(snap, canary_view=self._canary_view)
        return snap  # (final: drawn again after a seek, which drops it)

    def _canary_name(self) -> str | None:
        c = self.cfg.settings.canary if self.cfg is not None else None
        return c.name if c is not None and c.enabled and self.kind == "watch" else None

    def _quiet(self, f: _Follow | None) -> bool:
        """Whether this tick may skip the reads: PostgreSQL told this watcher of no write to
        the run (rows, live figures, a command, its canary) since its last read, and that
        read is recent — the net under a lost notification, and what keeps the executor's
        heartbeat (written without a notification) fresh here."""
        lis = self._listener
        if lis is None:
            return False
        run_id, name = self.run_id or "", self._canary_name()
        told = [lis.take(ROWS, run_id), lis.take(CONTROL, run_id),
                name is not None and lis.take(CANARY, name)]  # each taken, told or not
        return not (any(told) or lis.lost or f is None or f.snapshot is None
                    or self._seen is None or not self.active or self._more_rows
                    or time.monotonic() - self._read_at >= QUIET_READ_S)

    def _build(self, f: _Follow, run: RunRecord, live: dict, keys: tuple[KeyRow, ...],
               canary: str, canary_pct: float | None) -> Snapshot:
        status = f.status
        if self.active and self.paused:
            status = RunStatus.PAUSED
        elapsed = ((time.time() - run.started_at) if self.active else
                   min(self.at - run.started_at, run.wall_ms / 1000 or math.inf)
                   if self.at is not None else run.wall_ms / 1000)
        m = f.metrics
        ended = m.succeeded + m.failed
        f.snapshot = metrics_snapshot(
            m, run_id=run.id, simulated=run.simulated,
            gateways=tuple(run.config.get("gateways", {}) or (run.config.get("gateway", "?"),)),
            status=status, elapsed_s=elapsed, total=run.total,
            in_flight=len(f.working) if self.at is not None else int(live.get("in_flight", 0)),
            concurrency=int(live.get("concurrency") or run.config.get("concurrency", 0)),
            # a finished run: its average rate (the last seconds' rate is its tail)
            calls_per_s=None if self.active else (ended / elapsed if elapsed > 0 else 0.0),
            sla=run.sla,
            tasks_per_day=int(run.config.get("settings", {}).get("tasks_per_day", 12000)),
            client_bound=bool(live.get("client_bound") if self.active
                              else (run.summary or {}).get("client_bound")),
            keys=keys, readonly=self.readonly, source=self.kind, canary=canary,
            budget_usd=run.config.get("budget_usd"))
        f.final = not self.active  # the rows read after the status was final are all there are
        if self.observer is not None:
            self._observe_gauges(f, run, live, keys, canary_pct)
        return f.snapshot

    def _observe_gauges(self, f: _Follow, run: RunRecord, live: dict, keys: tuple[KeyRow, ...],
                        canary_pct: float | None) -> None:
        assert self.observer is not None
        lag = live.get("lag_p95_ms")
        self.observer.set_gauges(
            in_flight=len(f.working) if self.at is not None else int(live.get("in_flight", 0)),
            concurrency=int(live.get("concurrency") or run.config.get("concurrency", 0)),
            remaining=run.total - f.ended,
            paused=self.paused or bool(live.get("paused")), keys=keys,
            lag_s=lag / 1000.0 if lag is not None else None, canary_pct=canary_pct)
        if f.final:
            self.observer.end()

    async def _read_new_rows(self, f: _Follow, started_at: float) -> None:
        """Feed the metrics with the results, attempts and events stored since last time."""
        assert self.conn is not None and self.run_id is not None
        m = f.metrics
        # While the run executes, a tick reads at most TICK_ROWS rows of each kind: a burst
        # (1,000 calls ending at once) is spread over a few ticks instead of one 100 ms
        # tick; the first read and the read after the run ended take everything there is.
        cap = TICK_ROWS if self.active and f.results_at else None
        results = await reads.results_after(self.conn, self.run_id, f.results_at, cap,
                                            until=self.at)
        obs = self.observer
        for (rowid, seq, state, model, bucket, latency, ttft, t_in, t_out, cost, estimated,
             attempts, error_class, finished_at, gateway) in results:
            if obs is not None and rowid > self._observed[0]:
                obs.count_task(gateway, model, bucket, state, t_in, t_out, cost)
            i = f.index.get(seq)
            if i is None:
                continue  # a task this reader does not know (cannot happen: tasks come first)
            m.put_cell(i, TaskCell(seq, f.task_ids[i], state, model, bucket, latency, cost,
                                    attempts, error_class))
            at_s = finished_at - started_at
            if state == TaskState.SUCCEEDED:
                m.task_succeeded(latency, ttft, t_in, t_out, cost, bool(estimated), at_s)
            elif state == TaskState.FAILED:
                m.task_failed(error_class, at_s)
        self._more_rows = cap is not None and len(results) >= cap
        if results:
            f.results_at = results[-1][0]
            f.ended += len(results)
        lines: list[tuple[float, str]] = []
        attempts = await reads.attempts_after(self.conn, self.run_id, f.attempts_at,
                                              2 * cap if cap and f.attempts_at else None,
                                              until=self.at)
        for (id_, seq, n, outcome, sent_at, c, sc, wait, msg, detail, model, gateway, latency,
             ttft) in attempts:
            if obs is not None and id_ > self._observed[1]:
                i = f.index.get(seq)
                obs.count_call(gateway, model, f.buckets[i] if i is not None else "?",
                               outcome, c, latency, ttft)
            if outcome not in ("ok", "error"):
                continue  # a cancelled call was never answered
            m.call_ended(outcome == "ok")
            if outcome == "error":
                i = f.index.get(seq)
                tid = f.task_ids[i] if i is not None else f"#{seq}"
                lines.append((sent_at, call_line(tid, n, c, sc, wait, msg, detail)))
        self._more_rows |= cap is not None and bool(f.attempts_at) and len(attempts) >= 2 * cap
        if attempts:
            f.attempts_at = attempts[-1][0]
        # a new executor session re-reads the run from its start: the observer's counters
        # take each stored row once
        self._observed = (max(self._observed[0], f.results_at),
                          max(self._observed[1], f.attempts_at))
        events = await reads.events_after(self.conn, self.run_id, f.events_at, until=self.at)
        lines += [(at, event_line(kind, detail)) for _id, at, kind, detail in events]
        if events:
            f.events_at = events[-1][0]
        for at, text in sorted(lines, key=lambda x: x[0])[-LOG_LINES:]:
            m.line(at - started_at, text)

    # -- scrubbing a replay ----------------------------------------------------------------
    def span(self) -> tuple[float, float] | None:
        """(start, end) of the replayed run, unix seconds (None before it was read)."""
        r = self.record
        if r is None:
            return None
        return r.started_at, r.finished_at or r.heartbeat_at or r.started_at

    def seek(self, at: float) -> float:
        """Show the run as it was at `at` (clamped to its span) from the next snapshot:
        built afresh from the stored rows up to then. Returns the moment shown."""
        span = self.span()
        if span is not None:
            at = min(max(at, span[0]), span[1])
        self.at = at
        self.kind = "replay"
        self._follow = None  # the next snapshot reads the run afresh up to the moment
        return at

    async def moments(self) -> list[tuple[float, str]]:
        """The run's notable moments (first failure, cooldowns, alerts, canary moves),
        read with the replay's timeline (a finished run's do not change)."""
        from swarm_tui.store.moments import notable_moments

        assert self.conn is not None and self.record is not None
        if self.moments_read is None:
            tl = self._timeline
            self.moments_read = await notable_moments(
                self.conn, self.record, limit=50,
                first_failure=None if tl is None else (tl.first_failed_call(),))
        return self.moments_read

    def _working_at(self, f: _Follow, at: float) -> None:
        """The calls out at the replayed moment, as working cells (their answers came
        later: no result row is read for them)."""
        assert self._timeline is not None
        calls = self._timeline.calls_out
        m = f.metrics
        f.working = set()
        for seq, model, sent_at in calls.out_at(at):
            i = f.index.get(seq)
            if i is None or i in f.working:
                continue
            f.working.add(i)
            m.put_cell(i, TaskCell(seq, f.task_ids[i], TaskState.RUNNING, model,
                                    f.buckets[i], None, None, 0, None))
            m.slot_on(i, sent_at - f.started_at, int)  # (streamed so far: not stored)
        for seq in calls.waiting_at(at):
            i = f.index.get(seq)
            cell = m.cells[i] if i is not None else None
            if i is None or i in f.working or cell is None or cell.state in _FINAL:
                continue
            m.put_cell(i, TaskCell(seq, f.task_ids[i], TaskState.RETRYING, cell.model,
                                    cell.bucket, None, None, cell.attempts, None))

    async def detail(self, seq: int) -> TaskDetail | None:
        assert self.conn is not None and self.run_id is not None
        row, attempts = await reads.task_detail_row(self.conn, self.run_id, seq)
        if row is None:
            return None
        task = Task.model_validate_json(row[7])
        return TaskDetail(
            seq=row[0], task_id=row[1], state=row[2], model=row[3], gateway=row[4],
            bucket=row[5], key_fp=row[6], prompt=task.prompt, latency_ms=row[8], ttft_ms=row[9],
            queue_ms=row[10], tokens_in=row[11], tokens_out=row[12], cost_usd=row[13],
            error=f"{row[14]}: {row[15]}" if row[14] else None, response_text=row[16],
            attempts=attempts)

    async def keys(self) -> tuple[tuple[KeyRow, ...], str | None]:
        """The run's keys as its writer last stored them (with the heartbeat); a replay's
        as they were at its moment."""
        assert self.conn is not None and self.run_id is not None
        if self.at is not None:
            tl = self._timeline
            return await reads.keys_at(self.conn, self.run_id, self.at, None if tl is None
                                       else tl.calls_out.key_counts(self.at)), None
        return await reads.stored_keys(self.conn, self.run_id), None

    async def cost(self) -> CostReport | None:
        from swarm_tui.prices import load_price_table
        from swarm_tui.report.cost import stored_cost
        from swarm_tui.settings.loader import Settings

        if self.conn is None or self.run_id is None:
            return None
        if self.cfg is None:
            self.cfg = LoadedConfig(settings=Settings(), path=None,
                                    prices=load_price_table(None, {}, "shipped price table"))
        run = await get_run(self.conn, self.run_id, self.db_target)
        return await stored_cost(self.conn, run, ConfigView.of(self.cfg))

    async def key_op(self, op: str, ref: str, secret: str | None = None,
                     label: str | None = None) -> str:
        """retire / enable through the control table; a key itself never goes through the
        store, so `add` is the key file's job (the runner reloads it)."""
        if op == "add":
            raise UserError("key add: a watched run takes new keys from its gateway's key "
                            "file (`swarm-tui keys add` appends to it)")
        if not await self.control(f"key_{op}", ref):
            raise UserError(f"key {op}: read-only (watch --write to allow it)")
        return f"key {ref}: {op} sent to the run (applied within a second)"

    async def control(self, command: str, arg: str | None = None) -> bool:
        """Queue a command for the runner process (it polls the control table)."""
        if self.readonly or self.conn is None or self.kind == "replay" or self.run_id is None:
            return False
        if self.record is not None and not self.record.owner_alive():
            return False  # no living executor would ever apply it (resume the run first)
        try:
            await queue_command(self.conn, self.run_id, command, arg)
        except sqlite3.Error as e:  # e.g. a read-only role: the server refuses the INSERT
            raise db_error(self.db_target, e) from None
        if command in ("pause", "resume"):
            self.paused = command == "pause"
        return True
