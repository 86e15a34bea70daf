"""`swarm-tui serve`: the same console in a browser, for an engineer on a laptop who
tunnels to the bastion (`ssh -L 8000:localhost:8000 bastion`).

textual-serve runs one console process per browser tab (`swarm-tui watch …` with the web
driver) and relays it over a websocket. The served console watches a stored run — it never
executes one, so closing a tab stops nothing — and is read-only unless `--write`.
textual-serve has no login of its own: commands/serve_login.py puts one in front of it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import shlex
import signal
import ssl
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp_jinja2
from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server, log, to_int

from swarm_tui.commands.serve_login import (
    Login,
    private_key_file,
    private_socket,
    read_token_file,
)
from swarm_tui.core.moments import AT, RUN_ID
from swarm_tui.errors import UserError
from swarm_tui.store.target import DbTarget


def _base_argv(db: DbTarget, config: str | None) -> list[str]:
    """A server URL with a password came from SWARM_TUI_DB, which the tab's process
    inherits: it never goes on a command line."""
    argv = [sys.executable, "-m", "swarm_tui"]
    if isinstance(db, Path):
        argv += ["--db", str(db.resolve())]
    elif not db.has_password:
        argv += ["--db", db.url]
    if config:
        argv += ["--config", config]
    return argv


def console_command(db: DbTarget, config: str | None, run_id: str | None, write: bool,
                    theme: str | None) -> str:
    """The command each browser tab runs (a shell line: textual-serve starts it so)."""
    argv = [*_base_argv(db, config), "watch"]
    if run_id:
        argv.append(run_id)
    if write:
        argv.append("--write")
    if theme:
        argv += ["--theme", theme]
    return shlex.join(argv)


def moment_command(db: DbTarget, config: str | None, theme: str | None, run_id: str,
                   at: str) -> str | None:
    """The tab a link to a moment opens (`/at/RUN/TIME`, as alerts carry it): `replay RUN
    --at TIME`, read-only. None unless both parts are what a run id and a TIME look like —
    they come from a URL, so nothing in them may read as an option or reach a shell."""
    if not (RUN_ID.fullmatch(run_id) and AT.fullmatch(at)):
        return None
    argv = [*_base_argv(db, config), "replay", run_id, f"--at={at}"]
    if theme:
        argv += ["--theme", theme]
    return shlex.join(argv)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(command: str, host: str, port: int, write: bool, *,
          moment: Callable[[str, str], str | None] | None = None, socket: str | None = None,
          token_file: str | None = None, certfile: str | None = None,
          keyfile: str | None = None, public_url: str | None = None) -> None:
    """Serve the console behind a login (commands/serve_login.py). Off loopback only with
    TLS; on a Unix socket (mode 0600) for a tunnel no other local user can use."""
    if (certfile is None) != (keyfile is None):
        raise UserError("serve: --certfile and --keyfile go together")
    tls = certfile is not None
    if socket is None and not _loopback(host) and not tls:
        raise UserError(f"serve --host {host}: off loopback the console needs TLS "
                        "(--certfile/--keyfile); or keep 127.0.0.1 (or --socket) and an SSH "
                        "tunnel")
    context = None
    if tls:
        private_key_file(str(keyfile))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(str(certfile), str(keyfile))
        except (OSError, ssl.SSLError) as e:
            raise UserError(f"serve: certificate {certfile}: {e}") from None
    token = read_token_file(token_file) if token_file else secrets.token_urlsafe(32)
    scheme = "https" if tls else "http"
    url = public_url or f"{scheme}://{'127.0.0.1' if socket else host}:{port}"
    login = Login(token, f"swarm_tui_{port}", secure=tls)
    if socket is not None:
        private_socket(socket)
        print(f"swarm-tui: the console on the socket {socket} (mode 0600; tunnel it: "
              f"`ssh -L {port}:{socket} HOST`, then open {url})", file=sys.stderr)
    print(f"swarm-tui: the console ({'read-write' if write else 'read-only'}); log in at "
          f"{url}/?token={'<your token file>' if token_file else token}  — Ctrl-C stops "
          "serving", file=sys.stderr, flush=True)
    server = _LoggedInServer(command, login, moment, host=host, port=port, title="swarm-tui",
                             public_url=url)
    try:
        server.serve_on(socket=socket, ssl_context=context)
    except OSError as e:
        where = socket or f"{host}:{port}"
        raise UserError(f"serve {where}: cannot listen: {e.strerror or e}") from None


async def _never_framed(request: web.Request, response: web.StreamResponse) -> None:
    """No page of the console inside another site's frame (clicks a page elsewhere could
    steer), and none kept by a cache on the way (the scripts, the same for everyone, may
    be)."""
    response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
    response.headers["X-Frame-Options"] = "DENY"
    if not request.path.startswith("/static/"):
        response.headers.setdefault("Cache-Control", "no-store")


class _LoggedInServer(Server):
    """textual-serve's server with the login in front of every route, and a moment's page:
    `/at/RUN/TIME` opens the console replaying that run at that time (its websocket is
    `/ws/at/RUN/TIME`; the page's script appends the terminal size to it)."""

    def __init__(self, command: str, login: Login,
                 moment: Callable[[str, str], str | None] | None, **kw: Any) -> None:
        super().__init__(command, **kw)
        self.login = login
        self.moment = moment

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(self.login.middleware)
        app.on_response_prepare.append(_never_framed)
        if self.moment is not None:
            app.add_routes([
                web.get("/at/{run}/{at}", self.handle_moment, name="moment"),
                web.get("/ws/at/{run}/{at}", self.handle_websocket, name="moment_ws"),
            ])
        return app

    def _moment_command(self, request: web.Request) -> str:
        assert self.moment is not None
        command = self.moment(request.match_info["run"], request.match_info["at"])
        if command is None:
            raise web.HTTPNotFound(text="swarm-tui serve: not a run id and a time "
                                        "(/at/RUN/2026-12-05T14:03:20Z)\n")
        return command

    async def handle_moment(self, request: web.Request) -> web.Response:
        """The console's page, its websocket pointed at the moment's."""
        self._moment_command(request)  # a malformed link: 404 here, not a dead page
        context = await Server.handle_index.__wrapped__(self, request)  # type: ignore[attr-defined]
        run, at = request.match_info["run"], request.match_info["at"]
        ws = str(request.app.router["moment_ws"].url_for(run=run, at=at))
        context["app_websocket_url"] = context["app_websocket_url"].rsplit("/ws", 1)[0] + ws
        context["application"] = {"name": f"swarm-tui: {run} at {at}"}
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """textual-serve's own, with the command chosen by the route (its version reads
        `self.command` after an await, so it cannot be swapped per request)."""
        command = (self._moment_command(request) if "run" in request.match_info
                   else self.command)
        websocket = web.WebSocketResponse(heartbeat=15)
        width = to_int(request.query.get("width", "80"), 80)
        height = to_int(request.query.get("height", "24"), 24)
        app_service: AppService | None = None
        try:
            await websocket.prepare(request)
            app_service = AppService(command, write_bytes=websocket.send_bytes,
                                     write_str=websocket.send_str,
                                     close=websocket.close,  # type: ignore[arg-type]
                                     download_manager=self.download_manager,
                                     debug=self.debug)
            await app_service.start(width, height)
            try:
                await self._process_messages(websocket, app_service)
            finally:
                await app_service.stop()
        except asyncio.CancelledError:
            await websocket.close()
        except Exception as error:  # as textual-serve does: the tab ends, the server stays
            log.exception(error)
        finally:
            if app_service is not None:
                await app_service.stop()
        return websocket

    def serve_on(self, *, socket: str | None, ssl_context: ssl.SSLContext | None) -> None:
        """Server.serve with a Unix socket or TLS (it offers neither)."""
        self.initialize_logging()
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.add_signal_handler(signal.SIGINT, self.request_exit)
        loop.add_signal_handler(signal.SIGTERM, self.request_exit)
        where = {"path": socket} if socket else {"host": self.host, "port": self.port}
        web.run_app(self._make_app(), handle_signals=False, loop=loop, ssl_context=ssl_context,
                    print=lambda *a: None, **where)
