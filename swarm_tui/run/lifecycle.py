"""One run's execution in this process, from setup to close — the same steps for a new run,
a resume and a worker (issue 33: they were written out twice and drifted: a worker never
said when a consumer missed events, nor put its preflight warnings in the run's log).

    async with RunLifecycle(...) as life:
        runner = await life.prepare(heads, ...)   # clients, preflight, canary, the runner
        life.holds(claim)                          # the caller's own: create the run / join it
        interrupted = await life.execute(runner, started="session_started")

`execute` starts the store writer, the sidecars (canary, key-file watchers, metrics,
alerts, traces), runs the runner to its end and stops them in order; leaving the block
closes what was opened, whatever happened. What differs between a whole run and a worker is
one flag, `whole_run`: a worker's end is not the run's (no end alert, no run alerts, and its
writer does not set the run's status — the last worker out does).
"""

from __future__ import annotations

import dataclasses
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from types import TracebackType

from swarm_tui.canary.controller import CanaryController
from swarm_tui.core.events import CONTROL, Consumer
from swarm_tui.core.records import TaskHead
from swarm_tui.core.states import RunStatus
from swarm_tui.core.terminal import draws
from swarm_tui.engine.runner import SwarmRunner
from swarm_tui.run.control_poll import ControlPoll
from swarm_tui.run.progress import run_with_progress
from swarm_tui.run.recorder import RunRecorder
from swarm_tui.run.sidecars import Sidecars
from swarm_tui.run.wiring import RunOptions, RunSetup
from swarm_tui.runtime import collector_for_a_run
from swarm_tui.settings.loader import LoadedConfig, refuse_shared_secrets
from swarm_tui.store.claims import Claim
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.fences import LeaseFence
from swarm_tui.store.target import DbTarget
from swarm_tui.store.task_bodies import StoredBodies
from swarm_tui.store.writer import StoreWriter

Beside = Callable[[SwarmRunner], AbstractAsyncContextManager[object]]
OnStart = Callable[[SwarmRunner, RunSetup, CanaryController | None], None]


class RunLifecycle:
    def __init__(self, conn: StoreConnection, db_target: DbTarget, cfg: LoadedConfig,
                 opts: RunOptions, run_id: str, *, show_progress: bool,
                 whole_run: bool = True, warn_on_stderr: bool = True) -> None:
        # every result goes to the store: the runner need not keep the answers in memory
        self.setup = RunSetup(cfg, dataclasses.replace(opts, keep_answers=False))
        self.conn, self.db_target, self.run_id = conn, db_target, run_id
        self.show_progress, self.whole_run = show_progress, whole_run
        self.warn_on_stderr = warn_on_stderr  # not under a console: its screen is the terminal
        self.bodies = StoredBodies(db_target, run_id, cfg.settings.store.unwritable_grace_s)
        self.sidecars: Sidecars | None = None
        self.claim: Claim | None = None
        self.writer: StoreWriter | None = None
        self._warnings: list[str] = []

    async def __aenter__(self) -> RunLifecycle:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.bodies.aclose()
        if self.claim is not None:
            self.claim.release()  # the writer released it already unless we failed before
        if self.sidecars is not None:
            await self.sidecars.close()
        await self.setup.aclose()

    def holds(self, claim: Claim) -> None:
        """The claim this process writes the run under: released when the block ends."""
        self.claim = claim

    async def prepare(self, heads: Sequence[TaskHead], consumers: Iterable[Consumer] = (),
                      *, seqs: list[int] | None = None,
                      prior_attempts: list[int] | None = None) -> SwarmRunner:
        """Sidecars first (a busy metrics port is one line, before any call), then the
        clients, the preflight, the canary (before the runner: every task is routed at the
        stored percentage), and the runner."""
        refuse_shared_secrets(self.setup.cfg)  # before anything is sent with them
        self.sidecars = Sidecars(self.setup, self.db_target, self.run_id,
                                     self.show_progress)
        self.setup.open()
        self._warnings = [*self.setup.cfg.settings.alerts.unreachable_receivers(),
                          *await self.setup.preflight()]
        # --quiet silences progress, not warnings; a worker under `run --workers` (quiet,
        # not the whole run) leaves them to its starter and the run's log, a console to
        # its own screen (which shows the run's log)
        if self.warn_on_stderr and (self.show_progress or self.whole_run):
            for w in self._warnings:
                print(f"swarm-tui: warning: {w}", file=sys.stderr)
        await self.sidecars.open_canary()
        return self.setup.make_runner(heads, consumers, seqs=seqs,
                                      prior_attempts=prior_attempts, bodies=self.bodies)

    def _store_say(self) -> Callable[[str], None] | None:
        """A worker's store that holds it, said on stderr (the worker named): a worker shows
        no progress, nor does its starter, which shares that stderr. (A whole run says it
        in its progress line, as HELD, or — quiet — in its one line if it ends of it; a
        console in the run's log.)"""
        if self.whole_run or self.show_progress or not self.warn_on_stderr:
            return None
        return self._on_stderr("")

    def _warn_now(self) -> Callable[[str], None] | None:
        """A warning in the middle of a run, on stderr as the ones before and after it (a
        console's is in the run's log it shows)."""
        return self._on_stderr("warning: ") if self.warn_on_stderr else None

    def _on_stderr(self, lead: str) -> Callable[[str], None]:
        """Lines on stderr as this process's: a worker named; over a progress bar, on a line
        of their own."""
        claim = self.claim
        who = "" if self.whole_run or claim is None else f"worker {claim.host}:{claim.pid}: "
        clear = "\r\x1b[2K" if self.show_progress and draws(sys.stderr) else ""
        return lambda line: print(f"{clear}swarm-tui: {lead}{who}{line}", file=sys.stderr,
                                  flush=True)

    async def execute(self, runner: SwarmRunner, *, started: str, detail: str | None = None,
                      fence: LeaseFence | None = None, beside: Beside | None = None,
                      on_start: OnStart | None = None) -> signal.Signals | None:
        """Run to the end with the writer and sidecars around it; the signal that cancelled
        it (None: it ran to its end).
        `beside(runner)` (a worker's lease feed) is entered once everything watches the
        runner and left before anything stops."""
        assert self.sidecars is not None and self.claim is not None, "prepare, holds"
        grace = self.setup.cfg.settings.store.unwritable_grace_s
        async with collector_for_a_run():
            writer = self.writer = StoreWriter(self.conn, self.db_target, self.run_id, runner,
                                               claim=self.claim, fence=fence, grace_s=grace,
                                               say=self._store_say(), warn=self._warn_now(),
                                               wal_warn_bytes=int(
                                                   self.setup.cfg.settings.store.wal_warn_mib
                                                   * 2**20))
            # the engine's events into the writer's rows, and the commands queued for the
            # run applied between its flushes
            ControlPoll(RunRecorder(writer, runner))
            writer.log_event(started, detail)
            for w in self._warnings:  # into the run's log too (the console shows it)
                runner.emit(CONTROL, detail=f"preflight: {w}")
            writer.start()
            await self.sidecars.start(runner, run_alerts=self.whole_run)
            if on_start is not None:
                on_start(runner, self.setup, self.sidecars.canary)
            try:
                async with beside(runner) if beside is not None else nullcontext():
                    return await run_with_progress(runner, show=self.show_progress)
            finally:
                if runner.consumer_errors:  # metrics, alerts or traces missed events
                    print(f"swarm-tui: warning: {runner.consumer_errors} events were not "
                          f"taken by a consumer (first: {runner.consumer_error})",
                          file=sys.stderr)
                status = (RunStatus.UNSAVED if writer.failure else RunStatus.CANCELLED
                          if runner.cancelled else runner.stop_reason or RunStatus.FINISHED)
                # its end alert (a whole run's only) and deliveries: in the run's events
                for w in await self.sidecars.stop(status, end_alert=self.whole_run):
                    if self.warn_on_stderr and (self.show_progress or self.whole_run):
                        print(f"swarm-tui: warning: {w}", file=sys.stderr)
                # a worker's writer leaves the run running: the last worker out ends it
                ended = runner.stop_reason if self.whole_run else None
                await writer.close(RunStatus.CANCELLED if runner.cancelled
                                   else ended or "finished")
