"""The door of `swarm-tui serve`: a login, an Origin check, TLS and a private socket.

On a shared bastion every local user can reach 127.0.0.1, and every web page open in the
engineer's browser can reach a port tunnelled to it. So, as Jupyter does: a secret per
start (or the operator's token file) is printed once as a URL; the first request with it
is answered with an HttpOnly, SameSite=Strict cookie and a redirect that drops the token
from the address bar; every other request without the cookie gets 401 (a websocket 403).
The websocket also checks that its Origin is the served host (a page elsewhere cannot
drive the console with the engineer's cookie). Failed logins are logged and slowed.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import secrets
import stat
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler

from swarm_tui.errors import UserError

FAIL_DELAY_S = (0.5, 8.0)  # the first failed login waits this, doubling, up to the last


def read_token_file(path: str) -> str:
    """The operator's token: a file only its owner may read (else refused, one line)."""
    p = Path(path)
    try:
        st = p.stat()
        text = p.read_text().strip()
    except OSError as e:
        raise UserError(f"token file {path}: {e.strerror or e}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UserError(f"token file {path}: readable by others (mode "
                        f"{stat.S_IMODE(st.st_mode):o}); chmod 600 it")
    if len(text) < 16:
        raise UserError(f"token file {path}: the token is shorter than 16 characters")
    return text


def private_key_file(path: str) -> None:
    """The console's TLS key, refused when every user of this host may read it (whoever
    holds it can pose as the console and collect the token). A group may, as PostgreSQL
    allows its key to root's group: Debian's ssl-cert keys are 0640."""
    from swarm_tui.gateway.client_cert import world_readable_key

    problem = world_readable_key(Path(path))
    if problem is not None:
        raise UserError(f"serve: key file {path}: {problem}")


class Login:
    """Token → cookie, checked on every request (middleware)."""

    def __init__(self, token: str, cookie_name: str, secure: bool) -> None:
        self.token = token
        self.session = secrets.token_urlsafe(32)  # what the cookie carries, not the token
        self.cookie_name = cookie_name
        self.secure = secure
        self._failures: dict[str, tuple[int, float]] = {}  # peer -> (count, last at)

    def _ok(self, presented: str | None, secret: str) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(),
                                                             secret.encode())

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        token = request.query.get("token")
        if token is not None:
            if not self._ok(token, self.token):
                await self._failed(request)
                raise web.HTTPUnauthorized(text="swarm-tui serve: wrong token\n")
            self._failures.pop(self._peer(request), None)
            query = {k: v for k, v in request.query.items() if k != "token"}
            target = request.rel_url.with_query(query)
            found = web.HTTPFound(location=str(target))
            found.set_cookie(self.cookie_name, self.session, httponly=True, samesite="Strict",
                             secure=self.secure, path="/")
            raise found
        websocket = _is_websocket(request.path)
        if not self._ok(request.cookies.get(self.cookie_name), self.session):
            if websocket:
                raise web.HTTPForbidden(text="swarm-tui serve: login first\n")
            if _followed_from_elsewhere(request):
                # a link in a page or a pager: the browser withholds a SameSite=Strict
                # cookie from a navigation another site started, so the page asks again
                # from here — that request carries it (or, logged out, gets the 401)
                return web.Response(text=BOUNCE, content_type="text/html",
                                    headers={"Cache-Control": "no-store",
                                             "Referrer-Policy": "no-referrer"})
            raise web.HTTPUnauthorized(text="swarm-tui serve: open the URL with the token "
                                            "that `swarm-tui serve` printed\n")
        if websocket and not same_origin(request):
            _log(f"refused a websocket from Origin {request.headers.get('Origin')!r}")
            raise web.HTTPForbidden(text="swarm-tui serve: cross-origin websocket refused\n")
        return await handler(request)

    @staticmethod
    def _peer(request: web.Request) -> str:
        return request.remote or "unix socket"

    async def _failed(self, request: web.Request) -> None:
        peer = self._peer(request)
        count, _ = self._failures.get(peer, (0, 0.0))
        count += 1
        self._failures[peer] = (count, time.monotonic())
        delay = min(FAIL_DELAY_S[0] * 2 ** (count - 1), FAIL_DELAY_S[1])
        _log(f"failed login from {peer} ({count} in a row); answering in {delay:.1f} s")
        await asyncio.sleep(delay)


BOUNCE = ('<!doctype html><meta http-equiv="refresh" content="0">'
          '<title>swarm-tui</title><p>Opening the console…</p>')


def _is_websocket(path: str) -> bool:
    return path == "/ws" or path.startswith("/ws/")


def _followed_from_elsewhere(request: web.Request) -> bool:
    """A top-level navigation another site started (Fetch Metadata, sent by browsers
    since 2020): the only request that is answered without the cookie, with a page that
    holds nothing but a reload of itself."""
    return (request.method == "GET"
            and request.headers.get("Sec-Fetch-Site") == "cross-site"
            and request.headers.get("Sec-Fetch-Mode") == "navigate"
            and request.headers.get("Sec-Fetch-Dest") == "document")


def same_origin(request: web.Request) -> bool:
    """A browser always sends Origin on a websocket: it must name the host the page was
    served from (the Host header the browser used), and over this server's own TLS an
    https page (a plain-http page of that host and port cannot exist: only TLS is spoken
    there). Behind a TLS-terminating proxy either scheme. No Origin: not a browser."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    parts = urlsplit(origin)
    schemes = ("https",) if request.secure else ("http", "https")
    return parts.scheme in schemes and parts.netloc == request.host


def _log(line: str) -> None:
    print(f"swarm-tui serve: {line}", file=sys.stderr, flush=True)


def private_socket(path: str) -> None:
    """A Unix socket only its owner may connect to: created under a 0177 umask (no moment
    at which others could connect), its folder checked."""
    p = Path(path)
    if p.exists() and not p.is_socket():
        raise UserError(f"socket {path}: exists and is not a socket")
    if p.exists():
        p.unlink()
    os.umask(0o177)
