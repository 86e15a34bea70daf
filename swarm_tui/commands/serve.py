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
from pathlib import Path
from typing import Any

from aiohttp import web
from textual_serve.server import Server

from swarm_tui.commands.serve_login import Login, private_socket, read_token_file
from swarm_tui.errors import UserError
from swarm_tui.store.target import DbTarget


def console_command(db: DbTarget, config: str | None, run_id: str | None, write: bool,
                    theme: str | None) -> str:
    """The command each browser tab runs (a shell line: textual-serve starts it so). A
    server URL with a password came from SWARM_TUI_DB, which the tab's process inherits:
    it never goes on a command line."""
    argv = [sys.executable, "-m", "swarm_tui"]
    if isinstance(db, Path):
        argv += ["--db", str(db.resolve())]
    elif not db.has_password:
        argv += ["--db", db.url]
    if config:
        argv += ["--config", config]
    argv.append("watch")
    if run_id:
        argv.append(run_id)
    if write:
        argv.append("--write")
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


def serve(command: str, host: str, port: int, write: bool, *, socket: str | None = None,
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
    server = _LoggedInServer(command, login, host=host, port=port, title="swarm-tui",
                             public_url=url)
    try:
        server.serve_on(socket=socket, ssl_context=context)
    except OSError as e:
        where = socket or f"{host}:{port}"
        raise UserError(f"serve {where}: cannot listen: {e.strerror or e}") from None


class _LoggedInServer(Server):
    """textual-serve's server with the login in front of every route."""

    def __init__(self, command: str, login: Login, **kw: Any) -> None:
        super().__init__(command, **kw)
        self.login = login

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(self.login.middleware)
        return app

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
