"""The OTLP exporter as a run uses it: checked against the run's own CA bundle, and
counted, so that spans a collector never got are one line in the run's log rather than
the exporter's retry lines on standard error. Imported only when `[telemetry]
otlp_endpoint` is set (the `otel` extra)."""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Sequence
from typing import Any

import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from swarm_tui.redact import without_userinfo

# the exporter's own way to name the collector's CA: telemetry's alone, so it applies
OTEL_CA_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE")
# its retry and give-up lines: said once, in our words, by `Tally.line`
_EXPORTER_LOG = "opentelemetry.exporter"


def collector_trust() -> str | None:
    """The CA bundle an https collector is checked against: the one every gateway and
    webhook is (SSL_CERT_FILE / SSL_CERT_DIR, else the system's), unless an
    OTEL_…_CERTIFICATE variable names one for telemetry (None: the exporter applies it).
    Left to itself the exporter checked against certifi's bundle or REQUESTS_CA_BUNDLE: a
    company CA that lets the run reach its gateway had every span refused."""
    if any(os.environ.get(v) for v in OTEL_CA_VARIABLES):
        return None
    paths = ssl.get_default_verify_paths()  # SSL_CERT_FILE when it names a file
    if os.environ.get("SSL_CERT_DIR") and not os.environ.get("SSL_CERT_FILE"):
        # a CA given as a hashed folder only (c_rehash): requests takes a file or a
        # folder, not both, and the folder is what was named
        return paths.capath
    return paths.cafile or paths.capath


class Tally:
    """Spans made and delivered, and why the last delivery failed."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = without_userinfo(endpoint)
        self.made = 0
        self.delivered = 0
        self.reason: str | None = None

    def line(self) -> str | None:
        """One line for the run's log when spans were lost; None when all arrived."""
        lost = self.made - self.delivered
        if lost <= 0:
            return None
        why = self.reason or "the exporter gave up or dropped them"
        hint = ("; the collector's CA is read from SSL_CERT_FILE (or "
                "OTEL_EXPORTER_OTLP_CERTIFICATE)" if "certificate" in why else "")
        return (f"telemetry: {lost} of {self.made} spans NOT delivered to {self.endpoint} "
                f"({why}{hint})")


class _Session(requests.Session):
    """Keeps the CA bundle it is given: requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE
    (set on many hosts to the system's bundle) replace a session's own `verify` at every
    request (psf/requests#3829). The environment's proxy and netrc still apply. Notes why
    a post failed."""

    def __init__(self, tally: Tally) -> None:
        super().__init__()
        self.tally = tally

    def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any,
                                   cert: Any) -> Any:
        return super().merge_environment_settings(
            url, proxies, stream, self.verify if verify is None else verify, cert)

    def request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            resp = super().request(*args, **kwargs)
        except requests.RequestException as e:
            self.tally.reason = _reason(e)
            raise
        if not resp.ok:
            self.tally.reason = f"HTTP {resp.status_code} {resp.reason or ''}".strip()
        return resp


def _reason(e: BaseException) -> str:
    """The innermost cause, without the URL requests and urllib3 wrap around it."""
    seen: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and cur not in seen:
        seen.append(cur)
        nxt = getattr(cur, "reason", None)
        cur = nxt if isinstance(nxt, BaseException) else (cur.__cause__ or cur.__context__)
    for c in seen:
        if isinstance(c, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {c.verify_message}"
    if any(isinstance(c, requests.Timeout | TimeoutError) for c in seen):
        return "timed out"
    inner = seen[-1]
    if any(isinstance(c, requests.exceptions.ProxyError) for c in seen):
        # the environment's proxy said no to the CONNECT (`OSError: 407 Proxy …`)
        said = str(inner.args[-1] if inner.args else inner).split(": ", 1)[-1]
        how = "the proxy refused it" if said[:3].isdigit() else "its proxy is unreachable"
        return f"{how}: {said}"[:160]
    text = str(inner.args[-1] if isinstance(inner, OSError) and inner.args else inner)
    return f"{type(inner).__name__}: {text.split(': ', 1)[-1]}"[:160]


class _Counted(SpanExporter):
    def __init__(self, inner: SpanExporter, tally: Tally) -> None:
        self._inner, self._tally = inner, tally

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._inner.export(spans)
        if result == SpanExportResult.SUCCESS:
            self._tally.delivered += len(spans)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def exporter(endpoint: str, tally: Tally) -> SpanExporter:
    """The run's exporter; its own log lines are left to `tally.line()`."""
    log = logging.getLogger(_EXPORTER_LOG)
    log.propagate = False
    if not log.handlers:
        log.addHandler(logging.NullHandler())
    return _Counted(OTLPSpanExporter(endpoint, timeout=5, certificate_file=collector_trust(),
                                     session=_Session(tally)), tally)
