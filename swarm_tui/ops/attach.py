"""Attach metrics, alerts and traces to one executing run, and detach them at its end."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from swarm_tui.aio import cancel_and_wait
from swarm_tui.core import events as ev
from swarm_tui.core.states import RunStatus
from swarm_tui.ops.alerts import Alert, AlertWatch
from swarm_tui.ops.tracing import AttemptTracer
from swarm_tui.ops.webhooks import AlertDelivery
from swarm_tui.settings.loader import Settings
from swarm_tui.settings.run_sections import AlertKind

if TYPE_CHECKING:
    from swarm_tui.canary.controller import CanaryController
    from swarm_tui.engine.runner import SwarmRunner
    from swarm_tui.ops.metrics import MetricsServer, RunMetrics

TICK_S = 1.0
END_ALERT = {RunStatus.FINISHED: AlertKind.RUN_FINISHED, RunStatus.UNSAVED: AlertKind.RUN_FAILED}


def end_alert_of(run_id: str, status: str, counts: dict[str, int], total: int,
                 spent_usd: float) -> Alert:
    """The run's end: finished, failed to store, or interrupted (cancelled, budget)."""
    kind = END_ALERT.get(RunStatus(status), AlertKind.RUN_INTERRUPTED)
    return Alert(kind, f"run {status}: {counts['succeeded']} succeeded, {counts['failed']} "
                 f"failed, {counts['cancelled']} cancelled of {total}; ${spent_usd:.4f}",
                 run_id, details={"status": status, "total": total, **counts})


async def page_once(settings: Settings, alerts: list[Alert],
                    record: Callable[[str], None]) -> None:
    """Alerts sent after a process's run-time delivery has closed (a worker that ended
    its run pages the run's end once), drained as at any run's end."""
    if not settings.alerts.webhooks or not alerts:
        return
    delivery = AlertDelivery(settings.alerts, record)
    for alert in alerts:
        delivery.send(alert)
    await delivery.close()


class RunOps:
    """Built before the run (a busy metrics port is a one-line error before any call)."""

    def __init__(self, settings: Settings, run_id: str, simulated: bool,
                 metrics_port: int | None = None, metrics_bind: str = "127.0.0.1") -> None:
        self.settings = settings
        self.run_id = run_id
        self.metrics: RunMetrics | None = None
        self.server: MetricsServer | None = None
        if metrics_port is not None:
            # prometheus_client only when asked for: ~30 ms of CPU of every run and worker
            from swarm_tui.ops.metrics import MetricsServer, RunMetrics

            self.metrics = RunMetrics(run_id, simulated)
            self.server = MetricsServer(self.metrics, metrics_port, metrics_bind)
        self.runner: SwarmRunner | None = None
        self.canary: CanaryController | None = None
        self.watch: AlertWatch | None = None
        self.delivery: AlertDelivery | None = None
        self.tracer: AttemptTracer | None = None
        self._task: asyncio.Task[None] | None = None

    def attach(self, runner: SwarmRunner, canary: CanaryController | None, *,
               run_alerts: bool = True) -> None:
        """On the engine's loop, before the run starts. `run_alerts=False`: one of a run's
        workers — it pages its own conditions (keys, its SLA window), the canary moves its
        own controller made, and what the run's ledger tells it to (`page`); not every
        canary move it follows, nor its own end."""
        self.runner, self.canary = runner, canary
        s = self.settings
        if self.metrics is not None:
            runner.consumers.append(self.metrics.on_event)
        if s.alerts.webhooks:
            self.delivery = AlertDelivery(
                s.alerts, lambda line: runner.emit(ev.CONTROL, detail=line),
                self.metrics.delivered if self.metrics is not None else None)
            self.watch = AlertWatch(s.alerts, s.sla, self.run_id, self.delivery.send,
                                    run_level=run_alerts)
            runner.consumers.append(self.watch.on_event)
            if canary is not None:
                (canary.listeners if run_alerts else canary.own_moves).append(
                    self.watch.on_canary_change)
        if s.telemetry.otlp_endpoint:
            self.tracer = AttemptTracer(s.telemetry, self.run_id, runner)
            runner.consumers.append(self.tracer.on_event)
        if self.metrics is not None or self.watch is not None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            self.tick()
            await asyncio.sleep(TICK_S)

    def tick(self) -> None:
        assert self.runner is not None
        if self.metrics is not None:
            self.metrics.sample(self.runner, self.canary)
        if self.watch is not None:
            self.watch.tick(self.runner)

    async def finish(self, status: str, *, end_alert: bool = True) -> list[str]:
        """The run has ended (its writer still takes events): the last sample, the run's
        end alert (not from a worker whose run goes on), deliveries drained for at most
        [alerts] drain_s, traces exported. Returns the warnings it logged (spans lost)."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        if self.runner is not None and (self.metrics is not None or self.watch is not None):
            self.tick()
        if self.metrics is not None:
            self.metrics.end()
        if self.watch is not None:
            self.watch.resolve_all(f"run {status}")
        if (end_alert and self.watch is not None and self.delivery is not None
                and self.runner is not None):
            r = self.runner
            self.delivery.send(end_alert_of(self.run_id, status, dict(r.counts),
                                            len(r.records), r.spent_usd))
        if self.delivery is not None:
            await self.delivery.close()
        lost = None
        if self.tracer is not None:
            lost = await asyncio.to_thread(self.tracer.close)
            if lost is not None and self.runner is not None:
                self.runner.emit(ev.CONTROL, detail=lost)
        return [] if lost is None else [lost]

    async def linger(self, seconds: float) -> None:
        if self.server is not None and self.metrics is not None and seconds > 0:
            await self.server.linger(self.metrics, seconds)

    def page(self, kind: AlertKind, summary: str, **details: object) -> None:
        """An alert of the run the store told this process to send (a worker's share of
        run-level alerts); nothing without webhooks."""
        if self.watch is not None:
            self.watch.alert(kind, summary, **details)

    def close(self) -> None:
        """The metrics endpoint goes last (after the run's final figures were sampled)."""
        if self.server is not None:
            self.server.close()
            self.server = None
