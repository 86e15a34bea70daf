"""A raw ASGI app speaking OpenAI chat.completions (SSE and not) and /v1/models.

Raw ASGI rather than a framework: the simulator shares two cores with the
client under test, so its per-request CPU must stay small.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from swarm_tui.gateway.keys import fingerprint
from swarm_tui.sim.profiles import get_profile
from swarm_tui.sim.settings import SimSettings
from swarm_tui.token_count import estimate_tokens

MODELS = ("kimi-k2.5", "gpt-4.1", "claude-sonnet-4.5", "gemini-2.5-flash", "deepseek-v3.2")
_TEXT = "the swarm agent answers with a short careful summary of the task at hand " * 800
_TEXT_CHARS_PER_TOKEN = len(_TEXT) / estimate_tokens(_TEXT)  # an answer's tokens, estimated
_PROMPT_COUNTING: dict[str, Callable[[str], int]] = {
    "estimate": estimate_tokens,
    "chars4": lambda text: len(text) // 4,
    "bytes": lambda text: len(text.encode()),
}
_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class SimulatedCut(Exception):
    """Raised inside the app to make uvicorn drop the connection mid-stream."""


class _DropSimulatedCut(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, SimulatedCut)


logging.getLogger("uvicorn.error").addFilter(_DropSimulatedCut())


class SimApp:
    def __init__(self, settings: SimSettings | None = None) -> None:
        self.settings = settings or SimSettings()
        self.rng = random.Random(self.settings.seed)
        self.stats: Counter[str] = Counter()
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (level, updated)
        self._first_call: dict[str, float] = {}  # key -> monotonic time of its first call

    # -- ASGI entry ---------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path: str = scope["path"].rstrip("/")
        method: str = scope["method"]
        if path == "/sim/stats" and method == "GET":
            return await _send_json(send, 200, dict(self.stats))
        if path == "/sim/settings":
            return await self._settings_endpoint(method, receive, send)
        key = _bearer(scope)
        if key is None or (self.settings.keys is not None and key not in self.settings.keys):
            self.stats["401"] += 1
            return await _send_error(send, 401, "invalid_api_key", "Incorrect API key provided.")
        if path.endswith("/models") and method == "GET":
            if self.stats["models"] < self.settings.models_fail:
                self.stats["models"] += 1
                return await _send_error(send, 503, "server_error", "warming up")
            self.stats["models"] += 1
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "sim"} for m in MODELS]
            return await _send_json(send, 200, {"object": "list", "data": data})
        if path.endswith("/chat/completions") and method == "POST":
            # `active`: completions being answered now (a test waits for a killed client's
            # calls to settle on this, not on a sleep)
            self.stats["active"] += 1
            try:
                return await self._completion(key, receive, send)
            finally:
                self.stats["active"] -= 1
        return await _send_error(send, 404, "not_found", f"no route {method} {path}")

    async def _settings_endpoint(self, method: str, receive: Any, send: Any) -> None:
        if method == "POST":
            try:
                patch = json.loads(await _read_body(receive) or b"{}")
                self.settings = SimSettings.model_validate({**self.settings.model_dump(), **patch})
            except (ValueError, TypeError) as e:
                return await _send_error(send, 400, "invalid_request_error", str(e)[:200])
        return await _send_json(send, 200, self.settings.model_dump(exclude={"keys"}))

    # -- chat.completions ---------------------------------------------------------------
    async def _completion(self, key: str, receive: Any, send: Any) -> None:
        s = self.settings
        self.stats["requests"] += 1
        try:
            body = json.loads(await _read_body(receive))
            model = body["model"]
            messages = body["messages"]
            if not isinstance(model, str) or not model or not isinstance(messages, list) \
                    or not messages:
                raise ValueError
        except (ValueError, KeyError, TypeError):
            self.stats["400"] += 1
            return await _send_error(
                send, 400, "invalid_request_error", "model and messages required"
            )

        limit_headers, wait_s = self._outage(key) or self._rate_limit(key)
        if self.rng.random() < s.model_429.get(model, 0.0):
            self.stats["429"] += 1
            self.stats[f"429:{model}"] += 1
            return await _send_error(send, 429, "rate_limit_exceeded",
                                     f"Rate limit reached for model group {model}.")
        if wait_s is not None:
            self.stats["429"] += 1
            return await _send_error(
                send, 429, "rate_limit_exceeded", "Rate limit reached for requests (rpm).",
                headers=_retry_headers(wait_s) + limit_headers,
            )
        profile = get_profile(s.profile)
        rate_429 = profile.rate_429 if s.rate_429 is None else s.rate_429
        rate_503 = profile.rate_503 if s.rate_503 is None else s.rate_503
        u = self.rng.random()
        if u < rate_429:
            self.stats["429"] += 1
            await asyncio.sleep(0.005)
            return await _send_error(
                send, 429, "rate_limit_exceeded", "Rate limit reached, retry later.",
                headers=_retry_headers(s.retry_after_s) + limit_headers,
            )
        u -= rate_429
        if u < rate_503:
            self.stats["503"] += 1
            await asyncio.sleep(0.01)
            return await _send_error(send, 503, "server_error", "The gateway is overloaded.")
        u -= rate_503
        if u < s.rate_hang:
            self.stats["hang"] += 1
            await asyncio.sleep(s.hang_s)
            return await _send_error(send, 504, "timeout", "upstream timed out")
        u -= s.rate_hang
        cut = u < s.rate_cut
        quirk = self.rng.random()
        if s.fault_models is not None and model not in s.fault_models:
            quirk = 1.0
        poison = s.poison_text
        poisoned = (quirk < 1.0 and bool(poison) and isinstance(messages[-1], dict)
                    and poison is not None and poison in str(messages[-1].get("content") or ""))
        malformed = not poisoned and quirk < s.rate_malformed
        stream_error = poisoned or (not malformed
                                    and quirk < s.rate_malformed + s.rate_stream_error)

        latency_s = profile.sample_ms(self.rng) / 1000.0
        count = _PROMPT_COUNTING[s.prompt_counting]
        prompt_tokens = sum(count(m.get("content") or "") + 4
                            for m in messages if isinstance(m, dict))
        max_tokens = (
            body.get("max_tokens") or body.get("max_completion_tokens") or s.default_max_tokens
        )
        completion_tokens = max(1, int(max_tokens * (0.85 + 0.15 * self.rng.random())))
        usage = _usage(prompt_tokens, completion_tokens, s.cached_fraction, s.usage_style)
        ident = "chatcmpl-" + uuid.uuid4().hex[:24]
        created = int(time.time())
        text = _TEXT[: round(completion_tokens * _TEXT_CHARS_PER_TOKEN)]
        if body.get("stream") and not s.ignore_stream:
            want_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            quirks = {"malformed": malformed, "error": stream_error}
            await self._stream(send, ident, created, model, text, usage, latency_s, want_usage,
                               cut, limit_headers, quirks)
            if malformed or stream_error:
                return
        else:
            await asyncio.sleep(latency_s)
            if cut:
                self.stats["cut"] += 1
                raise SimulatedCut
            payload = {
                "id": ident, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
            }
            if s.usage_mode != "none":
                payload["usage"] = usage
            if malformed:  # the body stops half-way through its JSON
                self.stats["malformed"] += 1
                raw = json.dumps(payload).encode()
                await send({"type": "http.response.start", "status": 200,
                            "headers": _JSON + limit_headers})
                await send({"type": "http.response.body", "body": raw[: len(raw) // 2]})
                return
            await _send_json(send, 200, payload, limit_headers)
        self.stats["served"] += 1

    async def _stream(
        self, send: Any, ident: str, created: int, model: str, text: str, usage: dict[str, Any],
        latency_s: float, want_usage: bool, cut: bool, extra_headers: list[tuple[bytes, bytes]],
        quirks: dict[str, bool] | None = None,
    ) -> None:
        s = self.settings
        n = min(s.chunks, max(1, len(text)))
        ttft = latency_s * s.ttft_fraction
        step = (latency_s - ttft) / max(1, n - 1) if n > 1 else 0.0
        head = (
            f'data: {{"id":"{ident}","object":"chat.completion.chunk","created":{created},'
            f'"model":{json.dumps(model)},"choices":'
        )
        size = math.ceil(len(text) / n)
        await asyncio.sleep(ttft)
        await send({"type": "http.response.start", "status": 200, "headers": _SSE + extra_headers})
        for i in range(n):
            if i:
                await asyncio.sleep(step)
            if cut and i >= n // 2:
                self.stats["cut"] += 1
                raise SimulatedCut
            if quirks and i >= n // 2 and (quirks["malformed"] or quirks["error"]):
                if quirks["malformed"]:
                    self.stats["malformed"] += 1
                    bad = f'{head}[{{"index": 0, "delta": {{"content": "tru'
                else:
                    self.stats["stream_error"] += 1
                    code = s.stream_error_code
                    bad = ('data: {"error": {"message": "upstream failed mid-stream", '
                           f'"type": "server_error", "code": "{code}"}}}}')
                await send({"type": "http.response.body",
                            "body": f"{bad}\n\ndata: [DONE]\n\n".encode()})
                return
            delta = {"content": text[i * size:(i + 1) * size]}
            if i == 0:
                delta["role"] = "assistant"
            choice = [{"index": 0, "delta": delta, "finish_reason": None}]
            await send({"type": "http.response.body", "more_body": True,
                        "body": f"{head}{json.dumps(choice)}}}\n\n".encode()})
        final: dict[str, Any] = {"index": 0, "delta": {}, "finish_reason": "stop"}
        tail = f"{head}{json.dumps([final])}"
        if s.usage_mode == "inline":
            tail += f',"usage":{json.dumps(usage)}'
        tail += "}\n\n"
        if s.usage_mode == "final" and want_usage:
            tail += f'{head}[],"usage":{json.dumps(usage)}}}\n\n'
        await send({"type": "http.response.body", "body": (tail + "data: [DONE]\n\n").encode()})

    def _outage(self, key: str) -> tuple[list[tuple[bytes, bytes]], float] | None:
        """The scripted quota outage of one key (None: not this key, or not now)."""
        s = self.settings
        if s.outage_key_fp is None or s.outage_s <= 0:
            return None
        now = time.monotonic()
        first = self._first_call.setdefault(key, now)
        left = first + s.outage_start_s + s.outage_s - now
        if not 0 < left <= s.outage_s or fingerprint(key) != s.outage_key_fp:
            return None
        self.stats["outage"] += 1
        return _limit_headers(s.rpm_per_key or 6000, 0, left), left

    def _rate_limit(self, key: str) -> tuple[list[tuple[bytes, bytes]], float | None]:
        """Per-key request quota as a continuously refilling bucket, the way OpenAI and
        most proxies count. Returns (x-ratelimit headers, wait or None)."""
        rpm = self.settings.rpm_per_key
        if rpm is None:
            return [], None
        burst = float(self.settings.quota_burst or rpm)
        rate = rpm / 60.0
        now = time.monotonic()
        level, updated = self._buckets.get(key, (burst, now))
        level = min(burst, level + (now - updated) * rate)
        if level < 1.0:
            self._buckets[key] = (level, now)
            wait = (1.0 - level) / rate
            return _limit_headers(rpm, 0, (burst - level) / rate), wait
        level -= 1.0
        self._buckets[key] = (level, now)
        # limit = per minute; reset = time until the bucket is full again (OpenAI's meaning)
        return _limit_headers(rpm, int(level), (burst - level) / rate), None


def _limit_headers(limit: int, remaining: int, reset_s: float) -> list[tuple[bytes, bytes]]:
    return [
        (b"x-ratelimit-limit-requests", str(limit).encode()),
        (b"x-ratelimit-remaining-requests", str(remaining).encode()),
        (b"x-ratelimit-reset-requests", f"{reset_s:.3f}s".encode()),
    ]


def _retry_headers(wait_s: float) -> list[tuple[bytes, bytes]]:
    return [
        (b"retry-after", str(max(0, math.ceil(wait_s))).encode()),
        (b"retry-after-ms", str(round(wait_s * 1000)).encode()),
    ]


def _usage(prompt: int, completion: int, cached_fraction: float, style: str = "openai"
           ) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    cached = int(prompt * cached_fraction)
    if style == "deepseek":  # DeepSeek's own names for cache hits and misses
        usage["prompt_cache_hit_tokens"] = cached
        usage["prompt_cache_miss_tokens"] = prompt - cached
    elif cached_fraction:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def _bearer(scope: dict[str, Any]) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            v = value.decode("latin-1")
            if v.startswith("Bearer ") and len(v) > 7:
                return v[7:]
    return None


async def _read_body(receive: Any) -> bytes:
    chunks = []
    while True:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            return b"".join(chunks)


async def _send_json(
    send: Any, status: int, obj: Any, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": _JSON + (headers or [])})
    await send({"type": "http.response.body", "body": json.dumps(obj).encode()})


async def _send_error(
    send: Any, status: int, code: str, message: str,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    err = {"error": {"message": message, "type": code, "code": code, "param": None}}
    await _send_json(send, status, err, headers)
