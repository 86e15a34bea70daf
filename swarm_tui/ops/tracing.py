"""OpenTelemetry traces (the optional `otel` extra): one span per attempt, named and
attributed by the GenAI semantic conventions, exported over OTLP/HTTP in batches on the
SDK's own thread. Spans are made after the fact from the attempt's recorded times (the
hot path is not instrumented), and only when `[telemetry] otlp_endpoint` is set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from swarm_tui.core import events as ev
from swarm_tui.core.states import AttemptOutcome
from swarm_tui.errors import UserError
from swarm_tui.settings.run_sections import TelemetryConfig

if TYPE_CHECKING:
    from swarm_tui.core.records import Attempt, TaskRecord
    from swarm_tui.engine.runner import SwarmRunner


class AttemptTracer:
    def __init__(self, cfg: TelemetryConfig, run_id: str, runner: SwarmRunner) -> None:
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace import SpanKind, Status, StatusCode

            from swarm_tui.ops.otlp_delivery import Tally, exporter
        except ImportError:
            raise UserError("[telemetry] otlp_endpoint: traces need the otel extra "
                            "(pip install 'swarm-tui[otel]')") from None
        assert cfg.otlp_endpoint is not None
        endpoint = cfg.otlp_endpoint.rstrip("/")
        if not endpoint.endswith("/v1/traces"):
            endpoint += "/v1/traces"
        self._provider = TracerProvider(resource=Resource.create(
            {"service.name": cfg.service_name, "swarm_tui.run_id": run_id}))
        # bounded: an unreachable collector costs the end of the run at most ~5 s
        self.tally = Tally(endpoint)
        self._provider.add_span_processor(BatchSpanProcessor(
            exporter(endpoint, self.tally), export_timeout_millis=5000))
        self._tracer = self._provider.get_tracer("swarm_tui")
        self._kind, self._status, self._error = SpanKind.CLIENT, Status, StatusCode.ERROR
        self._runner = runner
        self._run_id = run_id
        self._servers: dict[str, tuple[str, int]] = {}  # gateway -> (host, port)
        for name, gw in runner.gateways.items():
            url = urlsplit(getattr(gw, "base_url", "") or "")
            if url.hostname:
                self._servers[name] = (url.hostname, url.port
                                       or (443 if url.scheme == "https" else 80))

    def on_event(self, e: ev.Event) -> None:
        if e.attempt is None or e.record is None:
            return
        if e.kind == ev.RETRY_SCHEDULED or e.kind in ev.FINAL_KINDS:
            self._span(e.record, e.attempt)

    def _span(self, a: TaskRecord, x: Attempt) -> None:
        # attempt times are ms since the run started; spans want ns since the epoch
        t0 = self._runner.started_wall * 1e9
        start = int(t0 + x.started_ms * 1e6)
        end = start + int((x.latency_ms or 0.0) * 1e6)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",  # the wire protocol: OpenAI-compatible
            "gen_ai.request.model": x.model,
            "gen_ai.usage.input_tokens": x.tokens_in,
            "gen_ai.usage.output_tokens": x.tokens_out,
            "swarm_tui.run_id": self._run_id,
            "swarm_tui.task_id": a.task.id,
            "swarm_tui.gateway": x.gateway,
            "swarm_tui.bucket": a.bucket,
            "swarm_tui.attempt": x.number,
            "swarm_tui.key": x.key_fp,      # a fingerprint, never the key
            "swarm_tui.queue_ms": x.queue_ms,
        }
        if a.task.max_tokens is not None:
            attrs["gen_ai.request.max_tokens"] = a.task.max_tokens
        if x.response_model:
            attrs["gen_ai.response.model"] = x.response_model
        if x.response_id:
            attrs["gen_ai.response.id"] = x.response_id
        if x.finish_reason:
            attrs["gen_ai.response.finish_reasons"] = [x.finish_reason]
        server = self._servers.get(x.gateway)
        if server is not None:
            attrs["server.address"], attrs["server.port"] = server
        if x.ttft_ms is not None:
            attrs["swarm_tui.ttft_ms"] = x.ttft_ms
        if x.status_code is not None:
            attrs["http.response.status_code"] = x.status_code
        span = self._tracer.start_span(f"chat {x.model}", kind=self._kind, start_time=start,
                                       attributes=attrs)
        if x.outcome != AttemptOutcome.OK:
            span.set_attribute("error.type", x.error_class or str(x.outcome))
            span.set_status(self._status(self._error, x.error_class or str(x.outcome)))
        span.end(end_time=end)
        self.tally.made += 1

    def close(self) -> str | None:
        """Export what is batched (bounded by the SDK's own timeout), then stop. Returns
        the line for spans the collector never got (None: every one arrived)."""
        self._provider.shutdown()
        return self.tally.line()
