"""The chat-completions wire protocol straight on aiohttp: the swarm's hot path.

Measured (issue 34): the openai SDK's per-call machinery — request build, pydantic
options, its httpx2-on-aiohttp shim, SSE decoding — cost 3-4x what aiohttp itself costs
per call, so one process could not keep more than ~100 calls of 200 ms in flight. Here
everything that can be built once is: one session per gateway, one URL, one header dict
per key; a call is one JSON dump, one POST and an SSE decoder reading bytes.

The SDK stays where it earns its place (preflight, model listing) and as the reference
path (`transport = "aiohttp" | "httpx2"`); tests/functional/test_wire_conformance.py holds the two
paths to the same stored results for every fault the simulator can script.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from swarm_tui.gateway.tls import aiohttp, load_deferred

try:  # the connection protocol whose data_received sees bytes as the loop reads them
    from aiohttp.client_proto import ResponseHandler
except ImportError:  # pragma: no cover - moved: latency ends where the engine handles it
    ResponseHandler = None  # type: ignore[assignment,misc]

ERROR_BODY_MAX = 65_536  # an error answer's body read for its message, at most
# An answer's body, at most: the team's answers are ~5 KB and a 128k-token one ~0.5 MB; a
# gateway or proxy streaming without end (or with no newline) grew the swarm process
# until the call's timeout — gigabytes on a fast link, on a host other people share.
ANSWER_MAX = 16 << 20


class AnswerTooLarge(Exception):
    """An answer past ANSWER_MAX bytes: a gateway or a proxy looping, never an LLM's
    answer. Not retried (class other): it was answered, and likely billed."""


class WireStatusError(Exception):
    """A non-2xx answer: its status, the headers that steer retries, its body."""

    def __init__(self, status: int, headers: dict[str, str], body: object, text: str) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.headers = headers
        self.body = body
        self.text = text


class InStreamError(Exception):
    """An error object where an answer should be (an SSE `error` event, or `{"error":
    …}` in a 200 stream or body): LiteLLM and others carry the upstream status in it."""

    def __init__(self, body: object) -> None:
        # `{"error": "rate limited, slow down"}`: the string is the message (it read "error")
        message = body.get("message") if isinstance(body, dict) else body
        self.message = str(message or "error")
        super().__init__(self.message)
        self.body = body


# The call being made in this task: the connection's protocol notes when its bytes come
# off the socket, the trace hook when its headers went out.
CURRENT_CALL: contextvars.ContextVar[Any] = contextvars.ContextVar("swarm_tui_call",
                                                                   default=None)


if ResponseHandler is not None:
    class WireTimedHandler(ResponseHandler):
        """aiohttp's connection protocol, noting when bytes come off the socket for the
        call the connection serves: the event loop calls data_received as it reads, before
        any of our code (or a parser) runs for them."""

        timed: Any = None

        def set_response_params(self, **kw: Any) -> None:
            # called in the task that sends the request once its connection is had, just
            # before its headers are written (no await between): our call, and the moment
            # it goes on the wire — as a trace's headers-sent signal tells, without the
            # trace's signals and parameter objects at every request (~2 % of the CPU)
            timed = self.timed = CURRENT_CALL.get()
            if timed is not None:
                went_out(timed)
            super().set_response_params(**kw)

        def data_received(self, data: bytes) -> None:
            timed = self.timed
            if timed is not None and not timed.ended_at:
                timed.wire_end = time.perf_counter()
            super().data_received(data)


def went_out(res: Any) -> None:
    """The call's request goes on the wire now: the client's own delay before it (a pool
    slot, a connection) is booked as queue time, and latency counts from here."""
    if not res.send_delay_ms:
        now = time.perf_counter()
        res.send_delay_ms = (now - res.sent_at) * 1000.0
        res.sent_at = now


async def on_headers_sent(_session: Any, _ctx: Any, _params: Any) -> None:
    # Runs in the task that made the request, so the contextvar is that call's result.
    res = CURRENT_CALL.get()
    if res is not None:
        went_out(res)


class HeldBack(Exception):
    """The call's gate said no once it had its connection (its route moved, its worker's
    lease lapsed): nothing was sent."""


class GatedConnector(aiohttp.TCPConnector):
    """Asks the call, once its connection is had, whether it may still go: between the
    engine's last look and here a call may wait for a pool slot or a new connection, and
    a canary aborted meanwhile (or a lease lapsed) would still see it sent. From here to the
    headers being written (and the send moment noted) nothing awaits, so a call that goes
    out was let go no earlier than its send moment."""

    async def connect(self, *args: Any, **kwargs: Any) -> Any:  # (whatever aiohttp passes)
        conn = await super().connect(*args, **kwargs)
        call = CURRENT_CALL.get()
        if call is not None and call.gate is not None and not call.gate():
            conn.release()  # unused: back to the pool
            call.held_back = True
            raise HeldBack("held back before it went out: not sent")
        return conn


def env_proxy(url: str) -> tuple[str | None, aiohttp.BasicAuth | None]:
    """The proxy this environment names for `url` (HTTPS_PROXY / HTTP_PROXY, NO_PROXY; its
    credentials from the proxy URL or ~/.netrc), as curl, httpx2 and aiohttp's own
    `trust_env` read it — but once per session: `trust_env` asks on a thread at every
    request, and reads ~/.netrc for the gateway too (a Bearer key beside it fails)."""
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    where = URL(url)
    try:
        proxy, auth = get_env_proxy_for_url(where)
    except LookupError:  # none named, or NO_PROXY covers the host
        return None, None
    if _in_no_proxy_block(where.host or ""):
        return None, None
    return str(proxy), auth


def _in_no_proxy_block(host: str) -> bool:
    """An address inside one of NO_PROXY's blocks (`10.0.0.0/8`, as curl and httpx2 read
    it; aiohttp's lookup matches names and single addresses only): a gateway there went
    through the proxy on two transports of three."""
    import ipaddress
    import urllib.request

    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False  # a name: matched by the lookup above (suffixes, `*`)
    for entry in urllib.request.getproxies_environment().get("no", "").split(","):
        try:
            if "/" in entry and address in ipaddress.ip_network(entry.strip(), strict=False):
                return True
        except ValueError:
            continue
    return False


def redirected(location: str) -> str:
    """A gateway's API answers; it does not send a call elsewhere. Followed, a redirect to
    another origin drops the key (the client strips Authorization there: the gateway
    answered 401, read as a rejected key) and turns a POST into a GET — so no transport
    follows one, and this says where it pointed (no user, no query)."""
    where = urlsplit(location)
    shown = urlunsplit((where.scheme, where.netloc.rsplit("@", 1)[-1], where.path, "", ""))
    return (f"redirected to {shown or '?'}; redirects are not followed (the key would not "
            "go with them): set base_url to the address it names")


def timed_session(pool: int, connect_timeout_s: float, keepalive_s: float = 5.0,
                  ssl: Any = True, proxy_for: str | None = None) -> aiohttp.ClientSession:
    """A session whose connections report when headers go out and bytes come in, and
    hold back a call whose gate says no (built on the running loop: a session belongs to
    the loop it was made on). `proxy_for`: the gateway's URL, whose proxy it goes through
    (a bastion's egress often has no other way out)."""
    proxy, proxy_auth = env_proxy(proxy_for) if proxy_for else (None, None)
    connector = GatedConnector(limit=pool, keepalive_timeout=keepalive_s, ssl=ssl)
    traces = None
    if ResponseHandler is not None and hasattr(connector, "_factory"):
        # aiohttp builds each connection's protocol from this factory
        connector._factory = functools.partial(  # type: ignore[assignment]
            WireTimedHandler, loop=asyncio.get_running_loop())
    else:  # an aiohttp whose internals moved: its public trace tells when headers go out
        trace = aiohttp.TraceConfig()
        trace.on_request_headers_sent.append(on_headers_sent)
        traces = [trace]
    return aiohttp.ClientSession(
        connector=connector, trace_configs=traces, auto_decompress=True, proxy=proxy,
        proxy_auth=proxy_auth,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s))


class WireClient:
    """One gateway's chat-completions endpoint: one session, one URL, a header dict per
    key — built once, used by every call."""

    def __init__(self, base_url: str, pool: int, timeout_s: float,
                 direct: bool = False, tls: Any = None) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.direct = direct  # never through the environment's proxy (the simulator)
        self.pool = pool
        self.connect_timeout_s = min(10.0, timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._headers: dict[str, dict[str, str]] = {}
        self.tls = True if tls is None else tls  # a client certificate's context, or aiohttp's
        if self.url.startswith("https:") and tls is None:
            load_deferred()  # now, not on the loop at the first call (gateway/tls.py)

    def _headers_for(self, secret: str) -> dict[str, str]:
        h = self._headers.get(secret)
        if h is None:
            h = self._headers[secret] = {"Authorization": f"Bearer {secret}",
                                         "Content-Type": "application/json",
                                         "Accept": "application/json, text/event-stream"}
        return h

    def forget(self, secret: str) -> None:
        self._headers.pop(secret, None)

    def session(self) -> aiohttp.ClientSession:
        s = self._session
        if s is None or s.closed:
            s = self._session = timed_session(
                self.pool, self.connect_timeout_s, ssl=self.tls,
                proxy_for=None if self.direct else self.url)
        return s

    def post(self, secret: str, body: dict[str, Any]) -> Any:
        """The POST as an async context manager (the response)."""
        data = encode_body(body)
        return self.session().post(self.url, data=data, headers=self._headers_for(secret),
                                   allow_redirects=False)

    async def list_models(self, secret: str) -> None:
        """GET /models with the key (preflight): a non-2xx raises WireStatusError, as a
        call's would; what it lists is not needed, only that the key is let in."""
        url = self.url.removesuffix("/chat/completions") + "/models"
        async with self.session().get(url, headers=self._headers_for(secret),
                                      allow_redirects=False) as resp:
            await raise_for_status(resp, lower_headers(resp))
            # the list is not read: one a gateway never ends would be read into memory
            # (leaving unread closes this one connection, once per run)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


_UTF8_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_ASCII_JSON = json.JSONEncoder(separators=(",", ":"))


def _plain(value: object) -> bool:
    """Every text in it ASCII and without DEL: what the two encoders write alike."""
    if isinstance(value, str):
        return value.isascii() and "\x7f" not in value
    if isinstance(value, dict):
        return all(_plain(k) and _plain(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return True


def encode_body(body: dict[str, Any]) -> bytes:
    """A call's JSON body. Text outside ASCII goes as UTF-8, not \\u escapes (a Korean
    prompt would double on the wire); an all-ASCII body — the common one — goes through the
    ASCII encoder: the same bytes, ~40 % sooner (10 µs of a 4 KB prompt here: json's C
    encoder is slower when it may pass text through). DEL is the one ASCII character the
    two write differently (escaped or not), so a text with one goes the UTF-8 way."""
    return (_ASCII_JSON if _plain(body) else _UTF8_JSON).encode(body).encode()


def lower_headers(resp: aiohttp.ClientResponse) -> dict[str, str]:
    return {k.lower(): v for k, v in resp.headers.items()}


async def read_answer(resp: aiohttp.ClientResponse) -> bytes:
    """A whole (not streamed) answer's body, at most ANSWER_MAX bytes."""
    body = bytearray()  # (grown in place: bytes += bytes copied it all with each piece)
    while len(body) <= ANSWER_MAX:
        more = await resp.content.read(ANSWER_MAX + 1 - len(body))
        if not more:
            return bytes(body)
        body += more
    raise AnswerTooLarge(f"answer past {ANSWER_MAX >> 20} MiB: not read on")


async def raise_for_status(resp: aiohttp.ClientResponse, headers: dict[str, str]) -> None:
    if resp.status < 300:
        return
    if resp.status < 400:  # not followed (the session's requests say so)
        raise WireStatusError(resp.status, headers, None,
                              redirected(resp.headers.get("Location", "")))
    raw = await resp.content.read(ERROR_BODY_MAX)
    text = raw.decode("utf-8", "replace")
    try:
        body: object = json.loads(text)
    except ValueError:
        body = None
    if resp.status == 407:  # a proxy may offer several ways to sign in, one header each
        headers = {**headers, "proxy-authenticate": ", ".join(
            resp.headers.getall("Proxy-Authenticate", []))}
    raise WireStatusError(resp.status, headers, body, text)


def checked(payload: object) -> object:
    """A decoded answer or chunk; an error object in its place raises."""
    if isinstance(payload, dict) and payload.get("error"):
        raise InStreamError(payload["error"])
    return payload


async def sse_data(content: aiohttp.StreamReader,
                   on_done: Callable[[], None] | None = None) -> AsyncIterator[object]:
    """Each SSE event's data, decoded from JSON, up to `[DONE]` (the rest of the body is
    read but not decoded, so the connection goes back to the pool; `on_done` is told it
    came). An `error` event, or an error object as the data, raises InStreamError."""
    unended: list[bytes] = []  # a line's pieces until its newline comes
    data: list[bytes] = []
    event: bytes | None = None
    done = False
    read = 0
    async for piece in content.iter_any():
        if done:
            continue
        read += len(piece)
        if read > ANSWER_MAX:
            raise AnswerTooLarge(f"streamed answer past {ANSWER_MAX >> 20} MiB: not read on")
        if b"\n" not in piece:  # kept, not joined and split again with every piece: a
            unended.append(piece)  # 16 MiB line in 4 KiB pieces took ~20 s of the loop
            continue
        if unended:
            unended.append(piece)
            piece, unended = b"".join(unended), []
        *lines, rest = piece.split(b"\n")
        if rest:
            unended.append(rest)
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if line:
                if line[0] == 58:  # ":" a comment (keep-alive)
                    continue
                name, _, value = line.partition(b":")
                if value[:1] == b" ":
                    value = value[1:]
                if name == b"data":
                    data.append(value)
                elif name == b"event":
                    event = value
                continue
            if not data:  # a blank line ends an event
                event = None
                continue
            raw, data = b"\n".join(data), []
            if raw == b"[DONE]":
                done = True
                if on_done is not None:
                    on_done()
                break
            payload = json.loads(raw)
            if event == b"error":
                raise InStreamError(payload.get("error", payload)
                                    if isinstance(payload, dict) else payload)
            event = None
            yield checked(payload)
    if unended and not done:  # the body's last line, with no newline after it
        name, _, value = b"".join(unended).rstrip(b"\r").partition(b":")
        if name == b"data":
            data.append(value[1:] if value[:1] == b" " else value)
    if data and not done:  # the last event, with no blank line after it
        raw = b"\n".join(data)
        if raw == b"[DONE]":
            if on_done is not None:
                on_done()
        else:
            yield checked(json.loads(raw))
