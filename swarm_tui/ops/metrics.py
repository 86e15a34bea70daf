"""Prometheus metrics for a run, with the official client library.

Counters and histograms are fed by engine events (the final event of each task and the
retry event that closes each earlier attempt — the same events the store records, so the
scrape agrees with `report`); gauges are sampled once a second on the engine's loop (the
scrape thread never walks the engine's structures). Names follow the Prometheus
conventions: a `swarm_tui_` namespace, base units (`_seconds`), `_total` on counters.
Labels are bounded: gateway, model, bucket, outcome, error class, a key's fingerprint —
never a task id, never key material.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from swarm_tui.core import events as ev
from swarm_tui.core.records import KeyRow
from swarm_tui.core.states import AttemptOutcome, KeyState, TaskState
from swarm_tui.engine.snapshot import HIST_EDGES_MS, key_rows
from swarm_tui.errors import UserError

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from swarm_tui.canary.controller import CanaryController
    from swarm_tui.core.records import Attempt, TaskRecord
    from swarm_tui.engine.runner import SwarmRunner

NS = "swarm_tui"
# Latency buckets in seconds: the console's edges, and 10 ms to 120 s at steps of ×1.2 —
# past any call timeout (the console's edges stopped at 2 s: a dashboard could never show
# a p95 above it, and read 4-20 % high below it), at most 20 % wide for interpolation
BUCKETS_S = tuple(sorted({ms / 1000.0 for ms in HIST_EDGES_MS}
                         | {round(0.01 * 1.2 ** i, 4) for i in range(52)}))
KEY_STATES = tuple(KeyState)
GATE_RESULTS = ("pass", "fail", "inconclusive")


class RunMetrics:
    """One run's metrics in their own registry (a process may run several in tests)."""

    def __init__(self, run_id: str, simulated: bool) -> None:
        self.registry = r = CollectorRegistry()
        # first in the registry, so first in every scrape: a scrape that reads
        # run_ended 1 (or ends the linger) began after the run ended, so every counter it
        # reads next is final. Registered last, a scrape could read the counters, then
        # the run's last task end and run_ended turn 1 — 1,499 of 1,500 tasks, "final".
        self.final_scraped = _FinalScrape()
        r.register(self.final_scraped)
        self.ended = Gauge(f"{NS}_run_ended", "1 once the run has ended: the figures are "
                           "final", registry=r)
        call_labels = ("gateway", "model", "bucket")
        self.calls = Counter(f"{NS}_calls", "Calls answered or ended, by outcome (ok, error, "
                             "cancelled) and error class", (*call_labels, "outcome",
                                                            "error_class"), registry=r)
        self.tasks = Counter(f"{NS}_tasks", "Tasks ended, by final state",
                             (*call_labels, "state"), registry=r)
        self.latency = Histogram(f"{NS}_call_latency_seconds", "Successful calls: request "
                                 "sent to last byte", call_labels, buckets=BUCKETS_S,
                                 registry=r)
        self.ttft = Histogram(f"{NS}_call_ttft_seconds", "Successful calls: request sent to "
                              "first token", call_labels, buckets=BUCKETS_S, registry=r)
        self.tokens = Counter(f"{NS}_tokens", "Tokens of ended tasks (estimated where the "
                              "gateway reported no usage)", ("gateway", "model", "direction"),
                              registry=r)
        self.cost = Counter(f"{NS}_cost_usd", "Cost of ended tasks at the price table, USD",
                            ("gateway", "model"), registry=r)
        self.unpriced = Counter(f"{NS}_unpriced_tasks", "Ended tasks on a model with no price "
                                "(their cost is not in the cost counter)", ("model",),
                                registry=r)
        self.in_flight = Gauge(f"{NS}_calls_in_flight", "Calls sent and not yet answered",
                               registry=r)
        self.concurrency = Gauge(f"{NS}_concurrency_limit", "The run's concurrency limit",
                                 registry=r)
        self.remaining = Gauge(f"{NS}_tasks_remaining", "Tasks of the run not yet ended",
                               registry=r)
        self.paused = Gauge(f"{NS}_dispatch_paused", "1 while dispatch is paused or held",
                            registry=r)
        self.keys = Gauge(f"{NS}_key_state", "1 for each API key's current state (key: its "
                          "fingerprint)", ("gateway", "key", "state"), registry=r)
        self.canary = Gauge(f"{NS}_canary_traffic_ratio", "Share of traffic routed to the "
                            "canary's candidate (0-1)", registry=r)
        self.gates = Gauge(f"{NS}_canary_gate", "1 for each canary gate's latest verdict",
                           ("gate", "result"), registry=r)
        self.lag = Gauge(f"{NS}_client_loop_lag_seconds", "p95 of the engine loop's "
                         "scheduling delay over the last 10 s (client-bound when large)",
                         registry=r)
        self.alerts = Counter(f"{NS}_alert_deliveries", "Alert deliveries by kind and result",
                              ("kind", "result"), registry=r)
        info = Gauge(f"{NS}_run_info", "The run this process executes or watches (value 1)",
                     ("run_id", "simulated"), registry=r)
        info.labels(run_id, str(simulated).lower()).set(1)
        # label children by key: prometheus_client validates labels on each .labels() call
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    # -- engine events (per event: a few dictionary lookups) ----------------------------------
    def on_event(self, e: ev.Event) -> None:
        kind = e.kind
        if kind == ev.RETRY_SCHEDULED and e.record is not None and e.attempt is not None:
            self._attempt(e.record, e.attempt)
        elif kind in ev.FINAL_KINDS and e.record is not None:
            a = e.record
            if e.attempt is not None:
                self._attempt(a, e.attempt)
            self.count_task(a.gateway, a.model, a.bucket, str(a.state), a.tokens_in,
                            a.tokens_out, a.cost_usd)

    def _attempt(self, a: TaskRecord, x: Attempt) -> None:
        self.count_call(x.gateway, x.model, a.bucket, str(x.outcome), x.error_class,
                        x.latency_ms, x.ttft_ms)

    # -- the counting itself: from engine events here, from stored rows for a watcher -------
    def count_call(self, gateway: str, model: str, bucket: str, outcome: str,
                   error_class: str | None, latency_ms: float | None,
                   ttft_ms: float | None) -> None:
        self._child(self.calls, gateway, model, bucket, outcome, error_class or "").inc()
        if outcome == AttemptOutcome.OK:
            if latency_ms is not None:
                self._child(self.latency, gateway, model, bucket).observe(latency_ms / 1000.0)
            if ttft_ms is not None:
                self._child(self.ttft, gateway, model, bucket).observe(ttft_ms / 1000.0)

    def count_task(self, gateway: str, model: str, bucket: str, state: str, tokens_in: int,
                   tokens_out: int, cost_usd: float | None) -> None:
        self._child(self.tasks, gateway, model, bucket, state).inc()
        self._child(self.tokens, gateway, model, "input").inc(tokens_in)
        self._child(self.tokens, gateway, model, "output").inc(tokens_out)
        if cost_usd is not None:
            self._child(self.cost, gateway, model).inc(cost_usd)
        elif state == TaskState.SUCCEEDED:
            self._child(self.unpriced, model).inc()

    # -- sampled once a second on the engine's loop ----------------------------------------
    def sample(self, runner: SwarmRunner, canary: CanaryController | None) -> None:
        lag = runner.loop_lag.recent_p95_ms()
        view = canary.view if canary is not None else None
        self.set_gauges(
            in_flight=runner.in_flight, concurrency=runner.limit,
            remaining=len(runner.records) - runner.done,
            paused=bool(runner.paused or runner.holds), keys=key_rows(runner.gateways),
            lag_s=lag / 1000.0 if lag is not None else None,
            canary_pct=view.state.pct if view is not None else None,
            gates=[(v.gate, v.result) for v in view.analysis.verdicts]
            if view is not None and view.analysis is not None else ())

    def set_gauges(self, *, in_flight: int, concurrency: int, remaining: int, paused: bool,
                   keys: Iterable[KeyRow], lag_s: float | None, canary_pct: float | None,
                   gates: Iterable[tuple[str, str]] = ()) -> None:
        self.in_flight.set(in_flight)
        self.concurrency.set(concurrency)
        self.remaining.set(remaining)
        self.paused.set(1 if paused else 0)
        for row in keys:
            for state in KEY_STATES:
                self._child(self.keys, row.gateway, row.fingerprint, state).set(
                    1 if row.state == state else 0)
        if lag_s is not None:
            self.lag.set(lag_s)
        if canary_pct is not None:
            self.canary.set(canary_pct / 100.0)
        for gate, verdict in gates:
            for result in GATE_RESULTS:
                self._child(self.gates, gate, result).set(1 if verdict == result else 0)

    def end(self) -> None:
        self.ended.set(1)
        self.final_scraped.armed = True

    def delivered(self, kind: str, ok: bool) -> None:
        self._child(self.alerts, kind, "delivered" if ok else "failed").inc()


class _FinalScrape:
    """A collector with no metrics: it notes the first scrape after the run ended (the
    scrape thread calls collect() once per request)."""

    def __init__(self) -> None:
        self.armed = False
        self.done = threading.Event()

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> list[Any]:
        if self.armed:
            self.done.set()
        return []


class MetricsServer:
    """`/metrics` over HTTP on its own thread (the library's server: a scrape never runs
    on the engine's loop)."""

    def __init__(self, metrics: RunMetrics, port: int, bind: str = "127.0.0.1") -> None:
        try:
            server, thread = start_http_server(port, bind, registry=metrics.registry)
        except OSError as e:
            raise UserError(f"--metrics-port {port}: cannot listen on {bind}:{port}: "
                            f"{e.strerror or e}") from None
        self._server: WSGIServer | None = server
        self._thread = thread
        self.port = server.server_address[1]

    async def linger(self, metrics: RunMetrics, seconds: float) -> bool:
        """After the run: serve the final figures until one scrape has read them or
        `seconds` pass (a short run ends between two scrapes). True: it was scraped."""
        scraped = await asyncio.to_thread(metrics.final_scraped.done.wait, seconds)
        if scraped:
            await asyncio.sleep(0.2)  # let that response go out before the server stops
        return scraped

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(5)
            self._server = None
