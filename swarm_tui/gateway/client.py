"""One AsyncOpenAI per (gateway, key), built once; one call = one attempt.

The SDK's own retries are off (`max_retries=0`): the engine is the one retry layer.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:  # the SDK is imported where a call goes through it (issue 34: the wire
    # path and a worker start without its ~0.35 s of imports)
    import ssl

    import httpx2
    import openai

from swarm_tui.core.fmt import whole
from swarm_tui.errors import UserError
from swarm_tui.gateway.errors import (
    AUTH,
    CONNECTION,
    TIMEOUT,
    CallError,
    ProtocolError,
    certificate_refused,
    classify,
    client_cert_refused,
    kept_headers,
    proxy_refusal,
    proxy_schemes,
)
from swarm_tui.gateway.keypool import KeyPool, KeySlot, QuotaScope, Strategy
from swarm_tui.gateway.tokens import TokenEstimator
from swarm_tui.gateway.wire import (
    CURRENT_CALL,
    WireClient,
    checked,
    lower_headers,
    raise_for_status,
    read_answer,
    sse_data,
    timed_session,
)
from swarm_tui.redact import without_userinfo

# wire: the protocol straight on aiohttp (the hot path); aiohttp / httpx2: through the
# openai SDK on that transport (the reference path, and always preflight's)
Transport = Literal["wire", "aiohttp", "httpx2"]
_INCLUDE_USAGE = {"include_usage": True}


class AttemptSink(Protocol):
    """Where a call reports live progress (the engine's agent record)."""

    def on_first_token(self, at: float) -> None: ...

    def on_progress(self, chars: int, at: float) -> None: ...


@dataclass(slots=True)
class CallResult:
    """What one attempt produced. Times are perf_counter seconds / milliseconds.

    `sent_at` starts as the moment we called the SDK and moves to the moment the
    request headers hit the socket when the transport reports it; the gap (the
    client building and queueing the request) is `send_delay_ms`, which the engine
    books as queue time — client overload is never reported as gateway latency.
    """

    sent_at: float
    send_delay_ms: float = 0.0
    ended_at: float = 0.0
    ttft_ms: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cached_in: int = 0
    usage_estimated: bool = False
    text: str = ""
    finish_reason: str | None = None
    status_code: int | None = None     # of an answer (a failure's is in `error`)
    response_id: str | None = None     # the completion's id and model, as the gateway said
    response_model: str | None = None
    headers: dict[str, str] | None = None
    error: CallError | None = None
    rate_note: str | None = None  # how the key changed after this call (for the log)
    wire_end: float = 0.0  # when the transport last read bytes of this answer off its socket
    # the stream's `data: [DONE]` was read: the gateway ended it, whole (the wire path
    # sees it; the SDK's stream swallows it)
    stream_done: bool = False
    # asked once the connection is had: may the call still go? (no: `held_back`, unsent)
    gate: Callable[[], bool] | None = None
    held_back: bool = False

    def mark_done(self) -> None:
        self.stream_done = True

    @property
    def latency_ms(self) -> float:
        return (self.ended_at - self.sent_at) * 1000.0

    @property
    def handling_ms(self) -> float:
        """From the answer's last bytes read off the socket to the engine handling them."""
        return (self.ended_at - self.wire_end) * 1000.0 if self.wire_end else 0.0

    def end_at_wire(self, handled_at: float) -> None:
        """The call ends when its last bytes came off the socket, not when a busy engine
        got to them (the loop reads a socket as soon as it runs; parsing and our code may
        wait behind other work). Never later than handled, never before the send."""
        self.ended_at = handled_at
        if self.sent_at < self.wire_end < handled_at:
            self.ended_at = self.wire_end


def _bounded_body(httpx2: Any) -> Callable[[Any], Awaitable[None]]:
    """A response hook for the SDK's client: the body is read through a counter that
    stops past ANSWER_MAX, as the wire path's reads do — a gateway or proxy that never
    ends its answer grew the process until the call's timeout (`--transport httpx2`) —
    and that tells the call when the stream's `data: [DONE]` went by (the SDK's stream
    swallows it; the wire path's reader sees it), so both paths judge a stream whole alike."""
    import re

    from swarm_tui.gateway.wire import ANSWER_MAX, CURRENT_CALL, AnswerTooLarge

    # at a line's start: a newline byte never occurs inside a JSON chunk (it is escaped)
    done = re.compile(rb"\ndata: ?\[DONE\]\r?(?:\n|$)")

    class Bounded(httpx2.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __aiter__(self) -> AsyncIterator[bytes]:
            read = 0
            tail = b"\n"  # the body's start is a line's; then its last bytes, for a
            call = CURRENT_CALL.get()  # sentinel split across two reads
            async for chunk in self.inner:
                read += len(chunk)
                if read > ANSWER_MAX:
                    raise AnswerTooLarge(f"answer past {ANSWER_MAX >> 20} MiB: not read on")
                # seen as it goes by: the SDK stops reading at the sentinel, not the end
                if call is not None and done.search(tail + chunk):
                    call.mark_done()
                tail = (tail + chunk)[-16:]
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    async def hook(response: Any) -> None:  # before the body is read, streamed or not
        response.stream = Bounded(response.stream)

    return hook


def build_http_client(transport: Transport, pool: int, timeout_s: float,
                      base_url: str, direct: bool = False,
                      tls: ssl.SSLContext | None = None) -> httpx2.AsyncClient:
    """`direct`: never through the environment's proxy (the built-in simulator: this
    process's own child on loopback, which a proxy elsewhere cannot reach). `tls`: a
    context with a client certificate, in place of the transport's default."""
    import httpx2
    import openai

    try:  # the SDK's own aiohttp transport; we only add a trace hook to its session
        from openai._vendor.httpx_aiohttp import AiohttpTransport
    except ImportError:  # pragma: no cover - a future SDK moved it: no wire timestamp
        AiohttpTransport = None  # type: ignore[assignment,misc]

    limits = httpx2.Limits(max_connections=pool, max_keepalive_connections=pool)
    timeout = httpx2.Timeout(timeout_s, connect=min(10.0, timeout_s))
    hooks = {"response": [_bounded_body(httpx2)]}
    # redirects not followed, as on the wire path (wire.redirected says why)
    kw: dict[str, Any] = {"limits": limits, "timeout": timeout, "event_hooks": hooks,
                          "follow_redirects": False}
    if transport == "httpx2":
        if direct:  # (plain http: nothing else it reads from the environment is needed)
            kw["trust_env"] = False
        if tls is not None:
            kw["verify"] = tls
        return openai.DefaultAsyncHttpxClient(**kw)
    if AiohttpTransport is None:  # pragma: no cover
        return openai.DefaultAioHttpClient(**kw)
    wire = AiohttpTransport(limits=limits)
    wire.client = functools.partial(timed_session, pool, min(10.0, timeout_s),
                                    limits.keepalive_expiry or 5.0, tls or wire.ssl_context,
                                    None if direct else base_url)  # httpx2 adds no proxy
    return openai.DefaultAioHttpClient(transport=wire, **kw)


def untrusted_line(where: str, why: str) -> str:
    """A gateway whose certificate this host does not trust: OpenSSL's reason, and for an
    unknown issuer (a company's own CA) where the CA's bundle goes."""
    line = f"{where}: its TLS certificate is not trusted ({why})"
    if "issuer" in why or "self-signed" in why or "self signed" in why:
        line += ("; a gateway behind a private CA: point SSL_CERT_FILE at that CA's PEM "
                 "bundle (docs/configuration.md)")
    return line


def client_cert_line(where: str, name: str, gave: bool, alert: str) -> str:
    """The gateway's TLS refused us at the handshake: it wants a client certificate, or
    not the one it was shown."""
    if gave:
        return (f"{where}: refused the client certificate it was shown ({alert}); check "
                f"client_cert / client_key in [gateways.{name}] against the CA it trusts")
    return (f"{where}: asks for a client certificate ({alert}); give it in "
            f"[gateways.{name}] client_cert (and client_key), PEM")


def _its_proxy(base_url: str) -> tuple[str | None, bool, str]:
    """The proxy the environment names for this gateway, as shown (never its user or
    password: `its proxy http://proxy.corp:3128 (HTTPS_PROXY)`), whether credentials go with
    it, and the variable."""
    from swarm_tui.gateway.wire import env_proxy

    proxy, auth = env_proxy(base_url)
    var = "HTTPS_PROXY" if base_url.startswith("https:") else "HTTP_PROXY"
    shown = f"its proxy {without_userinfo(proxy)} ({var})" if proxy else None
    return shown, auth is not None, var


def unreachable_line(where: str, base_url: str, why: str) -> str:
    """Through a proxy, "unreachable" names it: the proxy down or stalled is the usual
    cause, and one transport's error names no host at all (`ConnectionRefusedError`)."""
    shown, _, _ = _its_proxy(base_url)
    return f"{where}: unreachable{' through ' + shown if shown else ''}: {why}"


def proxy_line(where: str, base_url: str, status: int, reason: str,
               schemes: list[str] | None = None) -> str:
    """The proxy the environment names for this gateway refused the preflight: which proxy,
    which variable named it, and what it wants. `schemes`: the sign-ins it offers, when
    the transport kept them."""
    shown, auth, var = _its_proxy(base_url)
    named = shown or "its proxy"
    said = f"{status} {reason}".strip()
    if status == 407 and schemes and not any(s.lower() == "basic" for s in schemes):
        # a Windows shop's proxy: a user and password in the URL go as Basic, refused
        return (f"{where}: {named} asks for a sign-in swarm-tui cannot give "
                f"({', '.join(schemes)}; {said}): it sends a user and password as Basic "
                f"only; run a local relay that signs in for this host (cntlm, px) and point "
                f"{var} at it")
    if status == 407 and auth:
        return (f"{where}: {named} refused the user and password it was given ({said}); "
                f"check them in {var} or ~/.netrc")
    if status == 407:
        return (f"{where}: {named} asks for a user and password ({said}); give them in "
                f"{var} (http://USER:PASSWORD@host:port) or in ~/.netrc for the proxy's host")
    return f"{where}: {named} did not put the call through ({said})"


class GatewayClient:
    def __init__(
        self,
        name: str,
        base_url: str,
        keys: list[tuple[str, str | None]] | list[tuple[str, str | None, str]],
        *,
        pool: int,
        timeout_s: float = 30.0,
        stream: bool = True,
        pinned_model: str | None = None,
        simulated: bool = False,
        transport: Transport = "wire",
        strategy: Strategy = "least-in-flight",
        retry_after_cap_s: float = 30.0,
        quota_scope: QuotaScope = "auto",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`tls`: the context with the client certificate a gateway asks for
        (gateway/client_cert.py); None: the transport's default."""
        if not keys:
            raise UserError(f"gateway '{name}': no API key configured")
        self.tls = tls
        self.name = name
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.stream = stream
        self.pinned_model = pinned_model
        self.simulated = simulated
        self.transport: Transport = transport
        self.pool_size = pool
        self.pool = KeyPool(strategy, retry_after_cap_s, quota_scope)
        self.tokens = TokenEstimator()  # for calls the gateway reports no usage for
        self.wire = (WireClient(base_url, pool, timeout_s, direct=simulated, tls=tls)
                     if transport == "wire" else None)
        for entry in keys:
            self.add_key(*entry)

    def add_key(self, secret: str, label: str | None = None, source: str = "config") -> KeySlot:
        """Build the key's client once; a key already in the pool is returned as is."""
        found = self.pool.by_secret(secret)
        if found is not None:
            return found
        slot = KeySlot(secret, label, None, source)  # its SDK client: built when asked
        self.pool.add(slot)
        return slot

    def sdk(self, slot: KeySlot) -> openai.AsyncOpenAI:
        """The key's SDK client, built the first time a call goes through the SDK (the
        reference transports, preflight): the wire path never builds one."""
        if slot.client is None:
            import openai

            # The SDK timeout is a backstop; the engine's total deadline is `timeout_s`.
            sdk = "aiohttp" if self.transport == "wire" else self.transport
            slot.client = openai.AsyncOpenAI(
                api_key=slot.secret, base_url=self.base_url, max_retries=0,
                timeout=self.timeout_s + 5,
                http_client=build_http_client(sdk, self.pool_size, self.timeout_s + 5,
                                              self.base_url, direct=self.simulated,
                                              tls=self.tls))
        return slot.client

    @property
    def keys(self) -> list[KeySlot]:
        return self.pool.slots

    @property
    def _secrets(self) -> tuple[str, ...]:
        return tuple(s.secret for s in self.pool.slots)

    def pick_key(self, model: str = "", tokens: float = 0.0) -> KeySlot | None:
        """The pool's choice for the next call on `model`, counted in flight at once (a
        burst of launches in one loop turn must see each other); None while no key may
        take it now. Every picked key is released by `complete` or, for a call that
        never ran, `release`. `tokens`: what a tokens-per-minute quota charges the call."""
        slot = self.pool.pick(model, tokens=tokens)
        if slot is not None:
            self.pool.begin(slot, model, tokens=tokens)
        return slot

    def release(self, slot: KeySlot, model: str = "") -> None:
        self.pool.end(slot, error_class="cancelled", status_code=None, message=None,
                      retry_after_s=None, headers=None, model=model)

    async def complete(
        self,
        slot: KeySlot,
        model: str,
        messages: list[dict[str, str]],
        max_tokens: int | None,
        temperature: float | None,
        sink: AttemptSink,
        gate: Callable[[], bool] | None = None,
    ) -> CallResult:
        """One attempt, never raising for a gateway failure (it lands in `result.error`).
        `gate` is asked just before the request goes out (on the aiohttp transports): when
        it says no, nothing was sent, the key is not ended and `held_back` is set."""
        kwargs: dict[str, Any] = {"model": model, "messages": messages}
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        if temperature is not None:
            kwargs["temperature"] = temperature
        res = CallResult(sent_at=time.perf_counter(), gate=gate)
        sent_mono = time.monotonic()
        token = CURRENT_CALL.set(res)
        try:
            async with asyncio.timeout(self.timeout_s):
                if self.wire is not None:
                    await self._wire(slot.secret, kwargs, res, sink)
                elif self.stream:
                    await self._streamed(self.sdk(slot), kwargs, res, sink)
                else:
                    await self._plain(self.sdk(slot), kwargs, res)
        except asyncio.CancelledError:
            res.ended_at = time.perf_counter()
            self.release(slot, model)
            raise
        except Exception as exc:  # every gateway failure is classified, none escapes
            res.error = classify(exc, self._secrets)
        finally:
            CURRENT_CALL.reset(token)
        if res.held_back:  # (the SDK wraps our exception: the flag says what it was)
            res.error = None
            return res
        res.text = whole(res.text)  # a lone surrogate from the JSON: before any encode
        if not res.ended_at or res.error is not None:
            res.end_at_wire(time.perf_counter())
        if res.ttft_ms is not None and res.ttft_ms > res.latency_ms:
            res.ttft_ms = res.latency_ms  # its first token was handled after its last byte came
        if res.error is None and res.finish_reason is None and not res.stream_done:
            # ended without saying it was whole: cut by a proxy or a crash, retried as one
            res.error = CallError(CONNECTION, None, "stream ended before a finish_reason")
        if res.error is None and not (res.tokens_in or res.tokens_out):
            res.usage_estimated = True
            res.tokens_in, res.tokens_out = self.tokens.estimate(model, messages, res.text)
        elif res.error is None:
            self.tokens.learn(model, messages, res.text, res.tokens_in, res.tokens_out)
        err = res.error
        if err is None:  # an answer too may change the key (its models' quotas joined)
            res.rate_note = self.pool.end(
                slot, error_class=None, status_code=None, message=None, retry_after_s=None,
                headers=res.headers, tokens_in=res.tokens_in, tokens_out=res.tokens_out,
                model=model, sent_at=sent_mono)
        else:
            res.rate_note = self.pool.end(
                slot, error_class=err.error_class, status_code=err.status_code,
                message=err.message, retry_after_s=err.retry_after_s,
                headers=err.headers or res.headers, model=model, sent_at=sent_mono)
        return res

    async def _streamed(
        self, client: openai.AsyncOpenAI, body: dict[str, Any], res: CallResult,
        sink: AttemptSink,
    ) -> None:
        # client.post skips the SDK's per-call TypedDict transform of the params, and
        # AsyncStream[object] yields plain dicts instead of pydantic chunk models: together
        # they were most of the client CPU per call (profiled), while requests, SSE parsing,
        # in-stream error events and error types stay the SDK's.
        import openai

        stream = await client.post(
            "/chat/completions", cast_to=object, stream=True, stream_cls=openai.AsyncStream[object],
            body={**body, "stream": True, "stream_options": _INCLUDE_USAGE},
        )
        res.headers = kept_headers(stream.response.headers) or None
        res.status_code = stream.response.status_code
        if "json" in stream.response.headers.get("content-type", ""):
            # a gateway that ignores `stream: true` answers one JSON completion: that is
            # the answer (usage included), not a stream that ended early
            _take_completion(res, json.loads(await stream.response.aread()))
            await stream.response.aclose()
            return
        await _read_chunks(stream, res, sink)

    async def _wire(self, secret: str, body: dict[str, Any], res: CallResult,
                    sink: AttemptSink) -> None:
        assert self.wire is not None
        if self.stream:
            body = {**body, "stream": True, "stream_options": _INCLUDE_USAGE}
        async with self.wire.post(secret, body) as resp:
            headers = lower_headers(resp)
            res.status_code = resp.status
            await raise_for_status(resp, headers)
            res.headers = kept_headers(headers) or None
            if not self.stream or "json" in headers.get("content-type", ""):
                # (a gateway that ignores `stream: true` answers one JSON completion: that
                # is the answer, usage included, not a stream that ended early)
                _take_completion(res, checked(json.loads(await read_answer(resp))))
                return
            await _read_chunks(sse_data(resp.content, res.mark_done), res, sink)

    async def _plain(
        self, client: openai.AsyncOpenAI, body: dict[str, Any], res: CallResult
    ) -> None:
        import httpx2

        response = await client.post("/chat/completions", cast_to=httpx2.Response, body=body)
        res.headers = kept_headers(response.headers) or None
        res.status_code = response.status_code
        _take_completion(res, response.json())

    async def preflight(self, tries: int = 3) -> list[str]:
        """GET /models with every key, before anything is paid for. An unreachable gateway
        is one clear line (exit 2); a rejected key is disabled with a warning and the run
        goes on with the others — it fails only when no key works; a 429/503 here is
        retried, then a warning. Returns the warnings."""
        where = f"gateway '{self.name}' ({without_userinfo(self.base_url)})"
        warnings: list[str] = []
        working = 0
        rejected: list[str] = []
        last_reason = ""
        for slot in self.keys:
            for attempt in range(tries):
                try:
                    async with asyncio.timeout(min(self.timeout_s, 15.0)):
                        if self.wire is not None:  # the run's own path, not the SDK
                            await self.wire.list_models(slot.secret)
                        else:
                            await self.sdk(slot).models.list()
                    working += 1
                    break
                except Exception as exc:
                    err = classify(exc, self._secrets)
                    refused_cert = certificate_refused(exc)
                    refused_ours = client_cert_refused(exc)
                    proxied = proxy_refusal(exc)
                    offered = proxy_schemes(exc) if proxied is not None else None
                if err.status_code == 404:  # a gateway without /models: nothing to learn
                    working += 1
                    break
                if refused_cert is not None:
                    raise UserError(untrusted_line(where, refused_cert)) from None
                if refused_ours is not None:
                    raise UserError(client_cert_line(where, self.name, self.tls is not None,
                                                     refused_ours)) from None
                if proxied is not None:
                    raise UserError(proxy_line(where, self.base_url, *proxied,
                                               schemes=offered)) from None
                if err.error_class in (CONNECTION, TIMEOUT):
                    raise UserError(unreachable_line(where, self.base_url, err.message)
                                    ) from None
                if err.error_class == AUTH:
                    self.pool.disable(slot, f"{err.status_code} {err.message}"[:120])
                    rejected.append(f"{slot.fingerprint} ({err.status_code})")
                    last_reason = f"({err.status_code}): {err.message}"
                    warnings.append(f"{where}: key {slot.fingerprint} rejected "
                                    f"({err.status_code}: {err.message}); disabled, the run "
                                    "goes on with the other keys")
                    break
                if err.retryable and attempt < tries - 1:
                    await asyncio.sleep(min(2.0, err.retry_after_s or 0.25 * 2 ** attempt))
                    continue
                if err.retryable:  # busy, not broken: the run's own retries take it from here
                    warnings.append(f"{where}: preflight of key {slot.fingerprint} got "
                                    f"{err.status_code or err.error_class} {tries} times; "
                                    "going ahead")
                    working += 1
                    break
                raise UserError(f"{where}: preflight failed ({err.status_code}): "
                                f"{err.message}") from None
        if not working and len(rejected) == 1:
            raise UserError(f"{where}: key {rejected[0].split(' ')[0]} rejected {last_reason}")
        if not working:
            raise UserError(f"{where}: no key works: every key was rejected "
                            f"({', '.join(rejected)})")
        return warnings

    async def aclose(self) -> None:
        if self.wire is not None:
            await self.wire.aclose()
        for slot in self.keys:
            if slot.client is not None:
                await slot.client.close()


async def _read_chunks(chunks: AsyncIterator[object], res: CallResult,
                       sink: AttemptSink) -> None:
    """A streamed answer's chunks into the result: text, usage (on any chunk), the finish
    reason, the first token's time (as read off the socket) and live progress."""
    parts: list[str] = []
    chars = 0
    async for chunk in chunks:
        if not isinstance(chunk, dict):
            raise ProtocolError(f"stream chunk is {type(chunk).__name__}, not an object")
        if res.response_id is None:
            res.response_id, res.response_model = chunk.get("id"), chunk.get("model")
        usage = chunk.get("usage")
        if usage:  # accepted on any chunk, not only the last
            _take_usage(res, usage)
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            content = answer_text(delta.get("content")) if delta else None
            if content:
                now = time.perf_counter()
                if res.ttft_ms is None:
                    # read off the socket no later than the newest bytes the loop read
                    # (those hold this token, or came after it), never after now
                    wire = res.wire_end if res.sent_at < res.wire_end < now else now
                    res.ttft_ms = (wire - res.sent_at) * 1000.0
                    sink.on_first_token(now)
                parts.append(content)
                chars += len(content)
                sink.on_progress(chars, now)
            if choice.get("finish_reason"):  # (some servers write "" on every chunk)
                res.finish_reason = choice["finish_reason"]
    res.text = "".join(parts)


def answer_text(content: object) -> str:
    """A message's (or a delta's) content as the answer's text: a string, or a list of
    typed chunks whose `text` chunks are the answer — Mistral's reasoning models send
    `[{"type": "thinking", …}, {"type": "text", "text": "…"}]`; such a paid answer was
    booked failed and sent again. Reasoning chunks are not the answer and are left out."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content if isinstance(part, dict)
                       and part.get("type", "text") == "text"
                       and isinstance(part.get("text"), str))
    raise ProtocolError(f"content is {type(content).__name__}, not text")


def _take_completion(res: CallResult, completion: Any) -> None:
    if not isinstance(completion, dict):
        raise ProtocolError("completion is not a JSON object")
    if isinstance(completion.get("error"), dict):  # an error object with a 200 status
        import openai

        raise openai.APIError(str(completion["error"].get("message", "error")),
                              None,  # type: ignore[arg-type]  # no request object here
                              body=completion["error"])
    if completion.get("usage"):
        _take_usage(res, completion["usage"])
    res.response_id, res.response_model = completion.get("id"), completion.get("model")
    choices = completion.get("choices")
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        # answered in full with nothing in it — not a cut link ("stream ended…")
        raise ProtocolError("completion has no choices")
    message = choices[0].get("message")
    res.text = answer_text(message.get("content")) if isinstance(message, dict) else ""
    res.finish_reason = choices[0].get("finish_reason") or "stop"
    # Non-streamed: the whole answer arrives at once, so TTFT equals latency — one clock
    # reading for both (two readings differed by >1 ms on a loaded machine).
    res.end_at_wire(time.perf_counter())
    res.ttft_ms = res.latency_ms


def _count(value: object) -> int | None:
    """A token count as a gateway wrote it, if it is one: a whole number ≥ 0 (JSON may
    give 12.0); None or absent is 0. Anything else — negative, a string, true — is None."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and 0 <= value < 2 ** 53:
        return int(value)
    return None


def _take_usage(res: CallResult, usage: object) -> None:
    """The gateway's usage, when it is usage. A negative count was a negative cost — the
    budget's spend went down — and a string one raised in the arithmetic after the call;
    such usage is treated as absent: the tokens are estimated, the cap counts the call at
    its ceiling, the report marks it (~)."""
    if not isinstance(usage, dict):
        res.tokens_in = res.tokens_out = res.cached_in = 0
        return
    tokens_in, tokens_out = _count(usage.get("prompt_tokens")), _count(
        usage.get("completion_tokens"))
    if tokens_in is None or tokens_out is None:
        res.tokens_in = res.tokens_out = res.cached_in = 0
        return
    res.tokens_in, res.tokens_out = tokens_in, tokens_out
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:  # DeepSeek reports cache hits under its own name
        cached = usage.get("prompt_cache_hit_tokens")
    res.cached_in = min(_count(cached) or 0, tokens_in)
