"""Where the console's snapshots come from: a run in this process (live), or the store
(watch another process's run, or replay a finished one). No Textual here."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite

from swarm_tui.canary.controller import CanaryController
from swarm_tui.config import LoadedConfig, SlaConfig
from swarm_tui.engine import events as ev
from swarm_tui.engine.cost import CostReport, cost_report
from swarm_tui.engine.live import (
    HIST_EDGES_MS,
    AgentCell,
    KeyRow,
    LiveMetrics,
    Snapshot,
    histogram_bucket,
    key_rows,
    live_snapshot,
)
from swarm_tui.engine.runner import SwarmRunner
from swarm_tui.engine.state import STATES
from swarm_tui.engine.summary import summarize
from swarm_tui.errors import UserError
from swarm_tui.session import RunOptions, RunSession
from swarm_tui.store.control import queue_command
from swarm_tui.store.db import open_db
from swarm_tui.store.runs import RunRecord, get_run, list_runs, new_run_id, task_rows
from swarm_tui.workload import Task


@dataclass
class AgentDetail:
    seq: int
    task_id: str
    state: str
    model: str
    gateway: str
    bucket: str
    key_fp: str | None
    prompt: str
    latency_ms: float | None
    ttft_ms: float | None
    queue_ms: float
    tokens_in: int
    tokens_out: int
    cost_usd: float | None
    error: str | None
    response_text: str | None
    attempts: list[dict[str, Any]] = field(default_factory=list)


class LiveSource:
    """Runs the swarm in this process and stores it.

    The engine gets its own event loop on one dedicated thread (not a Textual thread
    worker, and never one per agent): measured, on the console's own loop a wave of
    1,000 calls ending together held key presses up to a second; on its own loop
    the GIL hands the UI a turn every few ms. Snapshots only read engine state;
    controls are marshalled onto the engine's loop.
    """

    kind = "live"

    def __init__(self, cfg: LoadedConfig, opts: RunOptions, tasks: list[Task], db_path: Path,
                 readonly: bool = False) -> None:
        self.cfg = cfg
        self.opts = opts
        self.tasks = tasks
        self.db_path = db_path
        self.readonly = readonly
        self.run_id = new_run_id()
        self.metrics = LiveMetrics()
        self.runner: SwarmRunner | None = None
        self.session: RunSession | None = None
        self.canary: CanaryController | None = None
        self.outcome = None
        self.error: str | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._want_paused = False
        self._done = threading.Event()

    async def run(self) -> None:
        """Awaitable from the UI's loop; the engine runs on its own thread and loop."""
        await asyncio.to_thread(self._thread_main)

    def _thread_main(self) -> None:
        from swarm_tui.cli import run_async

        try:
            run_async(self._engine())
        finally:
            self._done.set()

    async def shutdown(self, timeout_s: float = 30.0) -> None:
        """The console is closing: a run cannot outlive its process, so cancel it cleanly
        (results flushed, unsent tasks resumable) and wait for the engine thread."""
        if self.loop is None:
            return
        if self.active and self.runner is not None:
            self.loop.call_soon_threadsafe(self.runner.cancel)
        await asyncio.to_thread(self._done.wait, timeout_s)

    async def _engine(self) -> None:
        from swarm_tui.commands.execute import execute

        self.loop = asyncio.get_running_loop()

        def attach(runner: SwarmRunner, session: RunSession,
                   canary: CanaryController | None) -> None:
            self.runner, self.session, self.canary = runner, session, canary

        try:
            conn = await open_db(self.db_path)
            try:
                self.outcome = await execute(conn, self.db_path, self.cfg, self.opts, self.tasks,
                                             self.run_id, show_progress=False,
                                             consumers=[self.metrics], on_start=attach)
            finally:
                await conn.close()
        except UserError as e:
            self.error = str(e)

    @property
    def active(self) -> bool:
        r = self.runner
        return r is not None and not r.wall_ms and self.error is None

    @property
    def paused(self) -> bool:
        """As last commanded (the engine applies it on its own loop a moment later)."""
        return self._want_paused

    async def snapshot(self) -> Snapshot | None:
        r = self.runner
        if r is None or self.session is None:
            return None
        status = None
        if self.outcome is not None and self.outcome.interrupted:
            status = "cancelled"
        snap = live_snapshot(r, self.metrics, run_id=self.run_id,
                             simulated=self.session.simulated, sla=self.cfg.settings.sla,
                             tasks_per_day=self.cfg.settings.tasks_per_day,
                             readonly=self.readonly, status=status)
        view = self.canary.view if self.canary is not None else None
        if view is not None:
            snap = dataclasses.replace(snap, canary=view.status_line(), canary_view=view)
        return snap

    async def keys(self) -> tuple[tuple[KeyRow, ...], str | None]:
        """Every key's state, and a gateway whose keys are all cooling (the keys panel)."""
        r = self.runner
        return (key_rows(r.gateways), r.waiting_for_keys) if r is not None else ((), None)

    async def cost(self) -> CostReport | None:
        """The live run's cost from its agents (read only; a few ms at 10,000 agents)."""
        r = self.runner
        if r is None:
            return None
        s = self.cfg.settings
        agents = list(r.agents)
        return cost_report(
            agents, self.cfg.prices, run_id=self.run_id,
            wall_s=(r.wall_ms or (r.now_ms() if r.t0 else 0.0)) / 1000.0,
            tasks_per_day=s.tasks_per_day,
            long_model=s.routing.long_model if s.routing.enabled else None,
            finished_s=[a.finished_ms / 1000.0 if a.finished_ms is not None else None
                        for a in agents], budget_usd=r.policy.budget_usd)

    async def key_op(self, op: str, ref: str, secret: str | None = None,
                     label: str | None = None) -> str:
        """add (ref = gateway) / retire / enable (ref = fingerprint), on the engine's loop."""
        from swarm_tui.gateway import keyops

        runner, loop = self.runner, self._engine_loop()
        if runner is None or loop is None or not self.active:
            raise UserError(f"key {op}: no active run here")

        async def apply() -> str:
            if op == "add":
                gw = runner.gateways.get(ref)
                if gw is None:
                    raise UserError(f"key add: no gateway '{ref}' in this run")
                msg = keyops.add(gw, secret or "", label)
            elif op == "retire":
                msg = keyops.retire(runner.gateways, ref)
            else:
                msg = keyops.enable(runner.gateways, ref)
            runner.emit(ev.CONTROL, detail=msg + " (console)")
            runner.wake()  # a key back in the pool may unblock dispatch
            return msg

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(apply(), loop))

    async def canary_act(self, action: str, arg: str | None, reason: str | None) -> bool:
        """Through this run's controller (on the engine's loop), so routing follows at
        once. False: no canary in this run (the caller acts on the store instead)."""
        loop = self._engine_loop()
        if self.canary is None or loop is None:
            return False  # the run has ended: the caller acts on the stored canary
        try:
            fut = asyncio.run_coroutine_threadsafe(self.canary.act(action, arg, reason), loop)
        except RuntimeError:  # the engine's loop closed between the check and the call
            return False
        await asyncio.wrap_future(fut)
        return True

    def _engine_loop(self) -> asyncio.AbstractEventLoop | None:
        """The engine's loop while it still runs; None once the run (and its loop) ended."""
        loop = self.loop
        if loop is None or loop.is_closed() or self._done.is_set():
            return None
        return loop

    async def detail(self, seq: int) -> AgentDetail | None:
        r = self.runner
        if r is None:
            return None
        agent = next((a for a in r.agents if a.seq == seq), None)
        if agent is None:
            return None
        return AgentDetail(
            seq=agent.seq, task_id=agent.id, state=agent.state, model=agent.model,
            gateway=agent.gateway, bucket=agent.bucket, key_fp=agent.key_fp,
            prompt=agent.task.prompt, latency_ms=agent.latency_ms, ttft_ms=agent.ttft_ms,
            queue_ms=agent.queue_ms, tokens_in=agent.tokens_in, tokens_out=agent.tokens_out,
            cost_usd=agent.cost_usd,
            error=f"{agent.error_class}: {agent.error_message}" if agent.error_class else None,
            response_text=agent.response_text,
            attempts=[{"number": x.number, "model": x.model, "key_fp": x.key_fp,
                       "queue_ms": x.queue_ms, "latency_ms": x.latency_ms, "ttft_ms": x.ttft_ms,
                       "status_code": x.status_code, "error_class": x.error_class,
                       "error_message": x.error_message, "retry_wait_s": x.retry_wait_s,
                       "outcome": x.outcome} for x in agent.attempts],
        )

    # controls
    async def control(self, command: str, arg: str | None = None) -> bool:
        from swarm_tui.store.writer import apply_command

        loop = self._engine_loop()
        if self.readonly or self.runner is None or loop is None:
            return False
        try:
            loop.call_soon_threadsafe(apply_command, self.runner, command, arg)
        except RuntimeError:  # closed meanwhile: the run is over
            return False
        if command in ("pause", "resume"):
            self._want_paused = command == "pause"
        return True


class StoreSource:
    """A run read from the store: `watch` (another process writes it) or a replay."""

    kind = "watch"

    def __init__(self, db_path: Path, run_id: str | None, *, write: bool = False,
                 replay: bool = False, cfg: LoadedConfig | None = None) -> None:
        self.db_path = db_path
        self.cfg = cfg  # for the cost panel's price table (shipped table without it)
        self.run_id = run_id
        self.readonly = not write
        self.kind = "replay" if replay else "watch"
        self.conn: aiosqlite.Connection | None = None
        self.record: RunRecord | None = None
        self.error: str | None = None
        self.active = False
        self.paused = False  # as last commanded through the control table

    async def open(self) -> None:
        if self.conn is not None:
            return
        self.conn = await open_db(self.db_path, create=False)
        try:
            if self.run_id is None:
                runs = [r for r in await list_runs(self.conn, 20)
                        if r.effective_status() == "running"]
                if not runs:
                    raise UserError(f"database {self.db_path}: no running run to watch "
                                    "(give a RUN_ID, see `swarm-tui runs`)")
                self.run_id = runs[0].id
            await get_run(self.conn, self.run_id, self.db_path)  # unknown id: one line
        except BaseException:
            await self.close()  # aiosqlite's thread would keep the process alive
            raise

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    shutdown = close

    async def snapshot(self) -> Snapshot | None:
        assert self.conn is not None and self.run_id is not None
        self.record = run = await get_run(self.conn, self.run_id, self.db_path)
        stored = await task_rows(self.conn, self.run_id)
        s = summarize(stored, run_id=run.id, sla=run.sla, wall_ms=run.wall_ms,
                      status=run.effective_status(), simulated=run.simulated)
        status = run.effective_status()
        self.active = status == "running"
        async with self.conn.execute(
                "SELECT command FROM control WHERE run_id=? AND command IN ('pause', 'resume') "
                "ORDER BY id DESC LIMIT 1", (self.run_id,)) as cur:
            last = await cur.fetchone()
        self.paused = bool(last and last[0] == "pause")
        if self.active and self.paused:
            status = "paused"
        elapsed = (time.time() - run.started_at) if self.active else run.wall_ms / 1000
        counts = dict.fromkeys(STATES, 0)
        for t in stored:
            counts[t.state] = counts.get(t.state, 0) + 1
        hist = [0] * (len(HIST_EDGES_MS) + 1)
        for t in stored:
            if t.state == "succeeded" and t.latency_ms is not None:
                hist[histogram_bucket(t.latency_ms)] += 1
        log = await self._log_lines(run.started_at)
        async with self.conn.execute("SELECT live_json FROM runs WHERE id=?",
                                     (self.run_id,)) as cur:
            row = await cur.fetchone()
        live = json.loads(row[0]) if row and row[0] else {}  # the executor's heartbeat
        keys, _ = await self.keys()
        canary = "canary: off"
        c = self.cfg.settings.canary if self.cfg is not None else None
        if c is not None and c.enabled and self.kind == "watch":
            from swarm_tui.canary.store import read_state

            state = await read_state(self.conn, c.name)
            if state is not None:
                canary = f"canary {state.pct}% {state.status}"
        per_task = s.cost_per_task_usd
        tpd = int(run.config.get("settings", {}).get("tasks_per_day", 12000))
        cells = tuple(AgentCell(t.seq, t.task_id, t.state, t.model, t.bucket, t.latency_ms,
                                t.cost_usd, t.attempts, t.error_class) for t in stored)
        return Snapshot(
            run_id=run.id, simulated=run.simulated,
            gateways=tuple(run.config.get("gateways", {}) or (run.config.get("gateway", "?"),)),
            status=status, elapsed_s=elapsed, total=run.total, counts=counts,
            in_flight=int(live.get("in_flight", 0)) if self.active else 0,
            concurrency=int(live.get("concurrency") or run.config.get("concurrency", 0)),
            calls_per_s=(s.succeeded + s.failed) / elapsed if elapsed > 0 else 0.0,
            success_rate=s.success_rate,
            latency_ms=(s.latency_ms.p50, s.latency_ms.p95, s.latency_ms.p99),
            ttft_ms=(s.ttft_ms.p50, s.ttft_ms.p95), tokens_in=s.tokens.input,
            tokens_out=s.tokens.output, cost_usd=s.cost_usd, unpriced_tasks=s.unpriced_tasks,
            usage_estimated=bool(s.tokens.estimated_tasks),
            projected_month_usd=per_task * tpd * 30 if per_task is not None else None,
            sla=SlaConfig.model_validate(run.sla.model_dump()), agents=cells, log=log,
            histogram=tuple(hist), sparkline=(), readonly=self.readonly, source=self.kind,
            errors=s.errors, keys=keys, canary=canary,
            budget_usd=run.config.get("budget_usd"))

    async def _log_lines(self, started_at: float) -> tuple[str, ...]:
        """This run's stored log — failed attempts, fallbacks, controls, key and canary
        actions — the last 100, in the live log's format."""
        assert self.conn is not None
        async with self.conn.execute(
                "SELECT sent_at, t.task_id, number, error_class, status_code, retry_wait_s, "
                "error_message FROM attempts a JOIN tasks t ON t.run_id=a.run_id AND t.seq=a.seq "
                "WHERE a.run_id=? AND outcome='error' ORDER BY sent_at DESC LIMIT 100",
                (self.run_id,)) as cur:
            errs = list(await cur.fetchall())
        async with self.conn.execute(
                "SELECT at, kind, detail_json FROM events WHERE run_id=? "
                "ORDER BY at DESC LIMIT 100", (self.run_id,)) as cur:
            events = list(await cur.fetchall())
        lines = [(at, f"RETRY  {tid} #{n} {c} {sc or ''} +{w or 0:.2f}s" if w is not None
                  else f"FAIL   {tid} #{n} {c} {sc or ''} {(m or '')[:60]}")
                 for at, tid, n, c, sc, w, m in errs]
        tags = {"control": "CTRL  ", "fallback": "FALLBK"}
        lines += [(at, f"{tags.get(kind, kind.upper()[:6]):6} {detail or ''}")
                  for at, kind, detail in events]
        lines.sort(key=lambda x: x[0])
        return tuple(f"{at - started_at:7.1f}s {text}" for at, text in lines[-100:])

    async def detail(self, seq: int) -> AgentDetail | None:
        assert self.conn is not None
        async with self.conn.execute(
                "SELECT r.seq, r.task_id, r.state, r.model, r.gateway, r.bucket, r.key_fp, "
                "t.task_json, r.latency_ms, r.ttft_ms, r.queue_ms, r.tokens_in, r.tokens_out, "
                "r.cost_usd, r.error_class, r.error_message, r.response_text "
                "FROM task_results r JOIN tasks t ON t.run_id=r.run_id AND t.seq=r.seq "
                "WHERE r.run_id=? AND r.seq=?", (self.run_id, seq)) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        async with self.conn.execute(
                "SELECT number, model, key_fp, queue_ms, latency_ms, ttft_ms, status_code, "
                "error_class, error_message, retry_wait_s, outcome FROM attempts "
                "WHERE run_id=? AND seq=? ORDER BY number", (self.run_id, seq)) as cur:
            cols = ("number", "model", "key_fp", "queue_ms", "latency_ms", "ttft_ms",
                    "status_code", "error_class", "error_message", "retry_wait_s", "outcome")
            attempts = [dict(zip(cols, a, strict=True)) for a in await cur.fetchall()]
        task = Task.model_validate_json(row[7])
        return AgentDetail(
            seq=row[0], task_id=row[1], state=row[2], model=row[3], gateway=row[4],
            bucket=row[5], key_fp=row[6], prompt=task.prompt, latency_ms=row[8], ttft_ms=row[9],
            queue_ms=row[10], tokens_in=row[11], tokens_out=row[12], cost_usd=row[13],
            error=f"{row[14]}: {row[15]}" if row[14] else None, response_text=row[16],
            attempts=attempts)

    async def keys(self) -> tuple[tuple[KeyRow, ...], str | None]:
        """The run's keys as its writer last stored them (with the heartbeat)."""
        assert self.conn is not None
        async with self.conn.execute(
                "SELECT gateway, fingerprint, label, source, state, cooling_until, reason, "
                "in_flight, calls, rate_limited, errors, tokens_in, tokens_out, last_used "
                "FROM key_state WHERE run_id=? ORDER BY gateway, rowid", (self.run_id,)) as cur:
            return tuple(KeyRow(*row) for row in await cur.fetchall()), None

    async def cost(self) -> CostReport | None:
        from swarm_tui.commands.cost import stored_cost
        from swarm_tui.config import Settings
        from swarm_tui.prices import load_price_table

        if self.conn is None or self.run_id is None:
            return None
        if self.cfg is None:
            self.cfg = LoadedConfig(settings=Settings(), path=None,
                                    prices=load_price_table(None, {}, "shipped price table"))
        run = await get_run(self.conn, self.run_id, self.db_path)
        return await stored_cost(self.conn, run, self.cfg)

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
        if self.readonly or self.conn is None or self.kind == "replay":
            return False
        if self.record is not None and not self.record.owner_alive():
            return False  # no living executor would ever apply it (resume the run first)
        await queue_command(self.conn, self.run_id, command, arg)
        if command in ("pause", "resume"):
            self.paused = command == "pause"
        return True

