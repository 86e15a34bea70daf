"""Classify a failed call: what kind of failure, whether to retry, how long to wait."""

from __future__ import annotations

import asyncio
import email.utils
import time
from dataclasses import dataclass
from typing import Any

import httpx2
import openai

from swarm_tui.gateway.keys import redact

RATE_LIMITED = "rate_limited"
SERVER = "server"
TIMEOUT = "timeout"
CONNECTION = "connection"
AUTH = "auth"
BAD_REQUEST = "bad_request"
OTHER = "other"
CANCELLED = "cancelled"

RETRYABLE = frozenset({RATE_LIMITED, SERVER, TIMEOUT, CONNECTION})
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
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return max(0.0, float(ra))
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


def classify(exc: BaseException, keys: tuple[str, ...] = ()) -> CallError:
    """Map an exception from the SDK or its transport to a CallError; never keep a key."""
    if isinstance(exc, openai.APIStatusError):
        headers = kept_headers(exc.response.headers)
        msg = exc.message
        body = exc.body
        if isinstance(body, dict):
            inner = body.get("error", body)
            if isinstance(inner, dict) and isinstance(inner.get("message"), str):
                msg = inner["message"]
        return CallError(
            _status_class(exc.status_code), exc.status_code, _clean(msg, keys),
            retry_after_seconds(headers), headers or None,
        )
    if isinstance(exc, (openai.APITimeoutError, TimeoutError, asyncio.TimeoutError,
                        httpx2.TimeoutException)):
        return CallError(TIMEOUT, None, "no complete answer within the timeout")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return CallError(CONNECTION, None, _clean(f"{type(cause).__name__}: {cause}", keys))
    if isinstance(exc, (httpx2.TransportError, ConnectionError)):
        return CallError(CONNECTION, None, _clean(f"{type(exc).__name__}: {exc}", keys))
    return CallError(OTHER, None, _clean(f"{type(exc).__name__}: {exc}", keys))


def _clean(msg: str, keys: tuple[str, ...]) -> str:
    msg = " ".join(str(msg).split())
    return redact(msg, keys)[:300]
