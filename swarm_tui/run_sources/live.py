"""A run executed in this process, on its own thread and event loop; no Textual here."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from swarm_tui.canary.controller import CanaryController, CanaryView
from swarm_tui.core import events as ev
from swarm_tui.core.states import RunStatus
from swarm_tui.engine.control import apply_command
from swarm_tui.engine.cost import CostReport, cost_report
from swarm_tui.engine.runner import SwarmRunner
from swarm_tui.engine.snapshot import (
    KeyRow,
    LiveMetrics,
    Snapshot,
    key_rows,
    live_snapshot,
)
from swarm_tui.errors import UserError
from swarm_tui.run.engine_host import EngineGone, EngineHost
from swarm_tui.run.stored_run import Outcome, Resumed
from swarm_tui.run.wiring import RunOptions, RunSetup
from swarm_tui.run_sources.base import TaskDetail
from swarm_tui.settings.loader import LoadedConfig
from swarm_tui.settings.sections import CanaryConfig
from swarm_tui.store import reads
from swarm_tui.store.db import open_db
from swarm_tui.store.runs import new_run_id
from swarm_tui.store.target import DbTarget
from swarm_tui.workload import Task, Workload

if TYPE_CHECKING:
    from swarm_tui.store.conn import StoreConnection


class LiveSource:
    """Runs the swarm in this process and stores it.

    The engine runs on its own thread and loop (run/engine_host.py: not a
    Textual thread worker, and never one per agent). Snapshots only read engine state;
    controls reach its loop through the host.
    """

    kind = "live"
    at: float | None = None  # (a live run is always now)

    def __init__(self, cfg: LoadedConfig, opts: RunOptions, tasks: Workload | Sequence[Task],
                 db_target: DbTarget, readonly: bool = False,
                 resume: Resumed | None = None) -> None:
        self.cfg = cfg
        self.resume = resume  # a stored run taken up again (its id, what is left to send)
        self.opts = opts
        self.tasks = tasks
        self.db_target = db_target
        self.readonly = readonly
        self.run_id = resume.run_id if resume is not None else new_run_id()
        started = time.monotonic()
        # the charts' clock (throughput per second, calls/s) stops with the run: a finished
        # run's console shows its last minute, as its replay and `watch` do, not an
        # emptying chart of the seconds since
        self._stopped_at: float | None = None
        self.metrics = LiveMetrics(clock=lambda: time.monotonic() - started
                                   if self._stopped_at is None else self._stopped_at)
        self.runner: SwarmRunner | None = None
        self.setup: RunSetup | None = None
        self.canary: CanaryController | None = None
        self.outcome: Outcome | None = None
        self.error: str | None = None
        self.engine = EngineHost()
        self._want_paused = False
        self._reader: StoreConnection | None = None  # the detail view's, on the UI loop

    async def start(self) -> None:
        """Awaitable from the UI's loop; the engine runs on its own thread and loop."""
        await self.engine.run(self._engine)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The engine's loop (tests reach the runner through it)."""
        return self.engine.loop

    def canary_live(self) -> tuple[CanaryConfig, CanaryView | None] | None:
        c = self.canary
        if c is None:
            return None
        return c.cfg, c.view if self.active else None

    async def shutdown(self, timeout_s: float = 30.0) -> None:
        """The console is closing: a run cannot outlive its process, so cancel it cleanly
        (results flushed, unsent tasks resumable) and wait for the engine thread."""
        if self._reader is not None:
            await self._reader.close()
            self._reader = None
        if not self.engine.started:
            return
        if self.active and self.runner is not None:
            self.engine.call(self.runner.cancel)
        await self.engine.wait(timeout_s)

    async def _engine(self) -> None:
        from swarm_tui.run.stored_run import execute

        def attach(runner: SwarmRunner, setup: RunSetup,
                   canary: CanaryController | None) -> None:
            self.runner, self.setup, self.canary = runner, setup, canary

        try:
            conn = await open_db(self.db_target)
            try:
                r = self.resume
                self.outcome = await execute(
                    conn, self.db_target, self.cfg, self.opts, self.tasks, self.run_id,
                    show_progress=False, warn_on_stderr=False, consumers=[self.metrics],
                    on_start=attach,
                    seqs=r.seqs if r else None, prior_attempts=r.prior_attempts if r else None,
                    claim=r.claim if r else None)
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
        if r is None or self.setup is None:
            return None
        if r.wall_ms and self._stopped_at is None:
            self._stopped_at = self.metrics.clock()
        status = None
        if self.outcome is not None and self.outcome.interrupted:
            status = RunStatus.CANCELLED
        snap = live_snapshot(r, self.metrics, run_id=self.run_id,
                             simulated=self.setup.simulated, sla=self.cfg.settings.sla,
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
        records = list(r.records)
        return cost_report(
            records, self.cfg.prices, run_id=self.run_id,
            wall_s=(r.wall_ms or (r.now_ms() if r.t0 else 0.0)) / 1000.0,
            tasks_per_day=s.tasks_per_day,
            long_model=s.routing.long_model if s.routing.enabled else None,
            finished_s=[a.finished_ms / 1000.0 if a.finished_ms is not None else None
                        for a in records], budget_usd=r.policy.budget_usd)

    async def key_op(self, op: str, ref: str, secret: str | None = None,
                     label: str | None = None) -> str:
        """add (ref = gateway) / retire / enable (ref = fingerprint), on the engine's loop."""
        from swarm_tui.gateway import keyops

        runner = self.runner
        if runner is None or not self.engine.alive or not self.active:
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

        try:
            return await self.engine.submit(apply())
        except EngineGone:
            raise UserError(f"key {op}: the run has ended") from None

    async def canary_act(self, action: str, arg: str | None, reason: str | None) -> bool:
        """Through this run's controller (on the engine's loop), so routing follows at
        once. False: no canary in this run (the caller acts on the store instead)."""
        if self.canary is None or not self.engine.alive:
            return False  # the run has ended: the caller acts on the stored canary
        try:
            await self.engine.submit(self.canary.act(action, arg, reason))
        except EngineGone:  # it ended between the check and the call
            return False
        return True

    async def detail(self, seq: int) -> TaskDetail | None:
        r = self.runner
        if r is None:
            return None
        rec = next((a for a in r.records if a.seq == seq), None)
        if rec is None:
            return None
        answer, body = rec.response_text, rec.body
        prompt = body.prompt if body is not None else None
        attempts = [{"number": x.number, "model": x.model, "key_fp": x.key_fp,
                     "queue_ms": x.queue_ms, "latency_ms": x.latency_ms, "ttft_ms": x.ttft_ms,
                     "status_code": x.status_code, "error_class": x.error_class,
                     "error_message": x.error_message, "retry_wait_s": x.retry_wait_s,
                     "retry_detail": x.retry_detail, "outcome": x.outcome}
                    for x in rec.attempts]
        if prompt is None or (rec.final and not r.policy.keep_answers):
            # the runner holds a prompt only while its task is sent, an answer and the
            # attempts until they are stored
            stored = await self._stored(seq, rec.final)
            prompt = prompt or stored[0]
            answer = answer if answer is not None else stored[1]
            attempts = attempts or stored[2]
        return TaskDetail(
            seq=rec.seq, task_id=rec.id, state=rec.state, model=rec.model,
            gateway=rec.gateway, bucket=rec.bucket, key_fp=rec.key_fp,
            prompt=prompt or "", latency_ms=rec.latency_ms, ttft_ms=rec.ttft_ms,
            queue_ms=rec.queue_ms, tokens_in=rec.tokens_in, tokens_out=rec.tokens_out,
            cost_usd=rec.cost_usd,
            error=f"{rec.error_class}: {rec.error_message}" if rec.error_class else None,
            response_text=answer, attempts=attempts,
        )

    async def _stored(self, seq: int, final: bool
                      ) -> tuple[str | None, str | None, list[dict[str, Any]]]:
        """(prompt, answer, attempts) as the store has them; a moment after a task
        finished they may not be written yet."""
        assert self.run_id is not None
        if self._reader is None:
            try:  # one read connection for every detail; never a reconcile mid-run
                opened = await open_db(self.db_target, create=False, reconcile=False)
            except UserError:
                return None, None, []
            if self._reader is None:
                self._reader = opened
            else:  # two details raced to open it
                await opened.close()
        conn = self._reader
        raw = await reads.task_json(conn, self.run_id, seq)
        row, attempts = (await reads.task_detail_row(conn, self.run_id, seq) if final
                         else (None, []))
        prompt = Task.model_validate_json(raw).prompt if raw is not None else None
        if not final:
            return prompt, None, []
        answer = row[16] if row is not None and row[16] is not None else "(being stored…)"
        return prompt, answer, attempts

    # controls
    async def control(self, command: str, arg: str | None = None) -> bool:
        if self.readonly or self.runner is None:
            return False
        if not self.engine.call(apply_command, self.runner, command, arg):
            return False  # the run is over
        if command in ("pause", "resume"):
            self._want_paused = command == "pause"
        return True
