"""Classify a failed call: what kind of failure, whether to retry, how long to wait."""

from __future__ import annotations

import asyncio
import email.utils
import math
import sys
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from swarm_tui.core.fmt import whole
from swarm_tui.gateway.keys import redact


class ErrorClass(StrEnum):
    """Why a call failed (`attempts.error_class`, the status bar's error counts)."""

    RATE_LIMITED = "rate_limited"
    SERVER = "server"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    AUTH = "auth"
    BAD_REQUEST = "bad_request"
    PROTOCOL = "protocol"   # a malformed chunk or a truncated body: the transfer, not the ask
    OTHER = "other"
    CANCELLED = "cancelled"  # the call was stopped by us (a cancel), not by the gateway


RATE_LIMITED, SERVER, TIMEOUT, CONNECTION = (ErrorClass.RATE_LIMITED, ErrorClass.SERVER,
                                             ErrorClass.TIMEOUT, ErrorClass.CONNECTION)
AUTH, BAD_REQUEST, PROTOCOL, OTHER = (ErrorClass.AUTH, ErrorClass.BAD_REQUEST,
                                      ErrorClass.PROTOCOL, ErrorClass.OTHER)
CANCELLED = ErrorClass.CANCELLED

RETRYABLE = frozenset({RATE_LIMITED, SERVER, TIMEOUT, CONNECTION, PROTOCOL})


class ProtocolError(ValueError):
    """The gateway's answer could not be read (not JSON, not the shape of one)."""
_KEPT_HEADERS = ("retry-after", "retry-after-ms")


@dataclass(slots=True)
class CallError:
    error_class: str
    status_code: int | None
    message: str
    retry_after_s: float | None = None
    headers: dict[str, str] | None = None

    @property
    def retryable(self) -> bool:
        return self.error_class in RETRYABLE


def kept_headers(headers: Any) -> dict[str, str]:
    """Retry-After, retry-after-ms and x-ratelimit-*: the headers that steer retries and keys."""
    return {
        k: v for k, v in headers.items() if k in _KEPT_HEADERS or k.startswith("x-ratelimit-")
    }


def retry_after_seconds(headers: dict[str, str]) -> float | None:
    """retry-after-ms (OpenAI) wins over Retry-After (seconds or an HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            wait = float(ms) / 1000.0
            if not math.isnan(wait):  # `nan` is no wait (it read as 0: a retry at once)
                return max(0.0, wait)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        wait = float(ra)
        return max(0.0, wait) if not math.isnan(wait) else None
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(ra)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())


def _status_class(status: int) -> str:
    if status == 429:
        return RATE_LIMITED
    if status in (401, 403):
        return AUTH
    if status in (400, 404, 422):
        return BAD_REQUEST
    if status == 408:
        return TIMEOUT
    if status >= 500:
        return SERVER
    return OTHER


def _causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(out) < 8:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def certificate_refused(exc: BaseException) -> str | None:
    """Why the gateway's TLS certificate was refused (OpenSSL's words: "unable to get local
    issuer certificate", "certificate has expired", a host name mismatch), if that is why
    the connection failed — on any transport, however deep the ssl error is wrapped."""
    import ssl

    for c in _causes(exc):
        # aiohttp's own error is one too, without OpenSSL's words: they are in its cause
        why = getattr(c, "verify_message", None)
        if isinstance(c, ssl.SSLCertVerificationError) and why:
            return str(why)
    return None


# the alerts a server sends when it wanted a client certificate, or did not accept ours
_CLIENT_CERT_REFUSALS = ("certificate required", "bad certificate", "unknown ca",
                         "certificate unknown", "handshake failure", "certificate expired",
                         "certificate revoked", "access denied")


def client_cert_refused(exc: BaseException) -> str | None:
    """The gateway's TLS alert when it refused our client certificate (or wanted one):
    `tlsv13 alert certificate required`; None for anything else."""
    import re
    import ssl

    for c in _causes(exc):
        if isinstance(c, ssl.SSLCertVerificationError):
            return None  # ours refusing theirs: certificate_refused
        # an SSLError's reason, or its text inside a transport's own error
        # (`ClientOSError: [Errno 1] [SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] …`)
        reason = c.reason if isinstance(c, ssl.SSLError) else None
        m = re.search(r"\[SSL: ([A-Z0-9_]+)\]", str(c))
        why = (reason or (m[1] if m else "")).lower().replace("_", " ")
        if "alert" in why and any(r in why for r in _CLIENT_CERT_REFUSALS):
            return why
    return None


def proxy_refusal(exc: BaseException) -> tuple[int, str] | None:
    """(status, reason) when the proxy between us and the gateway refused the call — its
    answer to a CONNECT (a gateway over https), or a 407 in place of the gateway's answer
    (over http: only a proxy asks for credentials with 407) — on any transport."""
    import re

    from swarm_tui.gateway.tls import aiohttp
    from swarm_tui.gateway.wire import WireStatusError

    openai, httpx2 = sys.modules.get("openai"), sys.modules.get("httpx2")
    causes = _causes(exc)
    for c in causes:  # aiohttp's own (the SDK's aiohttp transport raises it as its cause)
        if isinstance(c, aiohttp.ClientHttpProxyError):
            return c.status, str(c.message or "")
    for c in causes:
        # httpx2's own refused CONNECT: "407 Proxy Authentication Required"
        if (httpx2 is not None and isinstance(c, httpx2.ProxyError)
                and (m := re.match(r"([1-5]\d\d)\b\s*(.*)", str(c)))):
            return int(m[1]), m[2].strip()
        if isinstance(c, WireStatusError) and c.status == 407:
            return 407, "Proxy Authentication Required"
        if (openai is not None and isinstance(c, openai.APIStatusError)
                and c.status_code == 407):
            return 407, "Proxy Authentication Required"
    return None


def proxy_schemes(exc: BaseException) -> list[str] | None:
    """The ways a proxy that answered 407 offers to sign in (`Proxy-Authenticate`: Basic,
    NTLM, Negotiate …), when the transport kept its headers (httpx2's refused CONNECT does
    not); None when unknown."""
    import re

    from swarm_tui.gateway.tls import aiohttp
    from swarm_tui.gateway.wire import WireStatusError

    openai = sys.modules.get("openai")
    for c in _causes(exc):
        values: list[str] | None = None
        if isinstance(c, aiohttp.ClientHttpProxyError) and c.headers is not None:
            values = list(c.headers.getall("Proxy-Authenticate", []))
        elif isinstance(c, WireStatusError) and c.status == 407:
            values = [c.headers.get("proxy-authenticate", "")]
        elif (openai is not None and isinstance(c, openai.APIStatusError)
              and c.status_code == 407):
            values = c.response.headers.get_list("proxy-authenticate", split_commas=False)
        if values is not None:
            # each challenge starts with its scheme: "Basic realm=corp, NTLM, Negotiate"
            found = re.findall(r"(?:^|,)\s*([A-Za-z][\w.-]*)(?=\s|,|$)", ", ".join(values))
            return [s for s in dict.fromkeys(found) if "=" not in s] or None
    return None


def _refused_or_reset(exc: BaseException) -> BaseException | None:
    """The aiohttp transport reports a refused connection as a connect *timeout* (after
    4 ms): look at the chain for what really happened."""
    from swarm_tui.gateway.tls import aiohttp

    for c in _causes(exc):
        if isinstance(c, ConnectionError | aiohttp.ClientConnectorError
                      | aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
            return c
    return None


def _body_class(body: object) -> tuple[str, int | None] | None:
    """An error object inside a 200 stream or body (`data: {"error": {"code": "503"}}`):
    LiteLLM and others send the upstream status as its code."""
    if not isinstance(body, dict):
        return None
    inner = body.get("error", body)
    if not isinstance(inner, dict):
        return None
    code = inner.get("code") or inner.get("status")
    status: int | None = None
    if isinstance(code, int) or (isinstance(code, str) and code.isdigit()):
        status = int(code)
    kind = " ".join(str(inner.get(k) or "") for k in ("type", "code")).lower()
    if status == 429 or "rate_limit" in kind or "rate limit" in kind:
        return RATE_LIMITED, status or 429
    if (status is not None and status >= 500) or any(
            w in kind for w in ("server_error", "overloaded", "unavailable", "timeout")):
        return SERVER, status
    if status is not None:
        return _status_class(status), status
    return None


def classify(exc: BaseException, keys: tuple[str, ...] = ()) -> CallError:
    """Map an exception from the wire client, the SDK or its transport to a CallError;
    never keep a key."""
    from swarm_tui.gateway.tls import aiohttp
    from swarm_tui.gateway.wire import (
        AnswerTooLarge,
        InStreamError,
        WireStatusError,
        redirected,
    )

    if isinstance(exc.__cause__, AnswerTooLarge):  # the SDK wraps what its client raised
        exc = exc.__cause__
    proxied = proxy_refusal(exc)
    if proxied is not None:  # not the gateway's word: no key rejected, no server error
        said, reason = proxied
        return CallError(CONNECTION if said >= 500 else OTHER, None,
                         _clean(f"the proxy refused it: {said} {reason}".strip(), keys))
    alert = client_cert_refused(exc)
    if alert is not None:  # its TLS said no to our certificate: a retry shows the same one
        return CallError(OTHER, None, f"the gateway refused the client certificate ({alert})")

    if isinstance(exc, WireStatusError):  # the wire path's non-2xx: as the SDK's below
        headers = kept_headers(exc.headers)
        inner = exc.body.get("error", exc.body) if isinstance(exc.body, dict) else None
        msg = (inner["message"] if isinstance(inner, dict)
               and isinstance(inner.get("message"), str) else exc.text or f"HTTP {exc.status}")
        return CallError(_status_class(exc.status), exc.status, _clean(msg, keys),
                         retry_after_seconds(headers), headers or None)
    if isinstance(exc, AnswerTooLarge):
        return CallError(OTHER, None, _clean(str(exc), keys))
    if isinstance(exc, InStreamError):
        found = _body_class(exc.body)
        cls, status = found if found is not None else (OTHER, None)
        return CallError(cls, status, _clean(f"in-stream error: {exc.message}", keys))
    if isinstance(exc, aiohttp.ClientPayloadError):  # the body stopped short: a cut stream
        return CallError(CONNECTION, None, _clean(f"{type(exc).__name__}: {exc}", keys))
    # the SDK's and its transport's errors, only when they were imported (the wire path
    # never imports them: nothing it raises can be one)
    openai = sys.modules.get("openai")
    httpx2 = sys.modules.get("httpx2")
    if openai is not None and isinstance(exc, openai.APIStatusError):
        headers = kept_headers(exc.response.headers)
        msg = exc.message
        if 300 <= exc.status_code < 400:  # not followed, as on the wire path
            msg = redirected(exc.response.headers.get("location", ""))
        body = exc.body
        if isinstance(body, dict):
            inner = body.get("error", body)
            if isinstance(inner, dict) and isinstance(inner.get("message"), str):
                msg = inner["message"]
        return CallError(
            _status_class(exc.status_code), exc.status_code, _clean(msg, keys),
            retry_after_seconds(headers), headers or None,
        )
    refused = _refused_or_reset(exc)
    if refused is not None:
        return CallError(CONNECTION, None, _clean(f"{type(refused).__name__}: {refused}", keys))
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)) or (
            openai is not None and isinstance(exc, openai.APITimeoutError)) or (
            httpx2 is not None and isinstance(exc, httpx2.TimeoutException)):
        return CallError(TIMEOUT, None, "no complete answer within the timeout")
    if openai is not None and isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return CallError(CONNECTION, None, _clean(f"{type(cause).__name__}: {cause}", keys))
    if isinstance(exc, ConnectionError) or (
            httpx2 is not None and isinstance(exc, httpx2.TransportError)):
        return CallError(CONNECTION, None, _clean(f"{type(exc).__name__}: {exc}", keys))
    if openai is not None and isinstance(exc, openai.APIError):  # in a stream / a 200 body
        found = _body_class(exc.body)
        if found is not None:
            cls, status = found
            return CallError(cls, status, _clean(f"in-stream error: {exc.message}", keys))
        return CallError(OTHER, None, _clean(f"in-stream error: {exc.message}", keys))
    if isinstance(exc, ValueError | UnicodeDecodeError):  # JSONDecodeError, ProtocolError
        return CallError(PROTOCOL, None, _clean(f"unreadable answer: {type(exc).__name__}: "
                                                f"{exc}", keys))
    return CallError(OTHER, None, _clean(f"{type(exc).__name__}: {exc}", keys))


def _clean(msg: str, keys: tuple[str, ...]) -> str:
    msg = " ".join(whole(str(msg)).split())
    return redact(msg, keys)[:300]
