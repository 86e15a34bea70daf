"""What runs beside an executing runner — the same for one process and for each worker:
the canary controller (it follows the stored canary, so N workers route alike and their
auto decisions are compare-and-swaps of which one wins), the key-file watchers (an edited
key file reaches every process's pool), and metrics, alerts and traces (ops/attach.py)."""

from __future__ import annotations

import sys

from swarm_tui.canary.controller import CanaryController
from swarm_tui.core.events import CONTROL
from swarm_tui.engine.routing import CanaryRouter
from swarm_tui.engine.runner import SwarmRunner
from swarm_tui.gateway.keyops import KeyFileWatcher
from swarm_tui.ops.attach import RunOps
from swarm_tui.run.wiring import RunSetup
from swarm_tui.store.target import DbTarget


class Sidecars:
    """Started around a runner by its RunLifecycle, stopped with it."""

    def __init__(self, setup: RunSetup, db_target: DbTarget, run_id: str,
                 show_progress: bool) -> None:
        """Built before anything starts: a busy metrics port is one line, before any call."""
        opts = setup.opts
        self.setup, self.db_target = setup, db_target
        self.ops = RunOps(setup.cfg.settings, run_id, setup.simulated, opts.metrics_port,
                          opts.metrics_bind)
        if self.ops.server is not None and show_progress:
            print(f"swarm-tui: metrics on http://{opts.metrics_bind}:{self.ops.server.port}"
                  "/metrics", file=sys.stderr)
        self.canary: CanaryController | None = None
        self._watchers: list[KeyFileWatcher] = []

    async def open_canary(self) -> CanaryController | None:
        """Before the runner exists: every task is routed at the stored percentage."""
        if self.setup.canary is not None:
            assert isinstance(self.setup.router, CanaryRouter)
            self.canary = CanaryController(self.setup.canary, self.setup.router,
                                           self.db_target)
            await self.canary.open()
        return self.canary

    async def start(self, runner: SwarmRunner, *, run_alerts: bool = True) -> None:
        """Once the runner's writer takes events: the canary evaluates and follows, key
        files are watched, ops attach. `run_alerts=False` (a worker): see RunOps.attach."""
        canary = self.canary
        if canary is not None:
            canary.client_lag = runner.loop_lag
            canary.on_change = lambda msg: runner.emit(CONTROL, detail=msg)
            await canary.evaluate()
            canary.start()

        def key_file_changed(msg: str) -> None:
            runner.emit(CONTROL, detail=msg)
            runner.wake()  # a key added or enabled may unblock parked tasks

        self._watchers = self.setup.key_watchers(key_file_changed)
        for watcher in self._watchers:
            watcher.start()
        self.ops.attach(runner, canary, run_alerts=run_alerts)

    async def stop(self, status: str, *, end_alert: bool = True) -> list[str]:
        """The run has ended here (its writer still takes events). Returns the warnings
        logged on the way (spans a collector never got)."""
        for watcher in self._watchers:
            await watcher.stop()
        self._watchers = []
        if self.canary is not None:  # its last move is paged before the run's end
            await self.canary.stop()
        return await self.ops.finish(status, end_alert=end_alert)

    async def close(self) -> None:
        self.ops.close()
        if self.canary is not None:
            await self.canary.close()
