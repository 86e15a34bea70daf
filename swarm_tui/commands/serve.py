"""`swarm-tui serve`: the same console in a browser, for an engineer on a laptop who
tunnels to the bastion (`ssh -L 8000:localhost:8000 bastion`).

textual-serve runs one console process per browser tab (`swarm-tui watch …` with the web
driver) and relays it over a websocket. The served console watches a stored run — it never
executes one, so closing a tab stops nothing — and is read-only unless `--write`.
textual-serve has no login of its own: it binds to localhost unless told otherwise, and
says so when it is told.
"""

from __future__ import annotations

import ipaddress
import shlex
import sys
from pathlib import Path

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


def serve(command: str, host: str, port: int, write: bool) -> None:
    from textual_serve.server import Server

    if not _loopback(host):
        print(f"swarm-tui: warning: serving on {host}:{port} without a login: anyone who can "
              f"reach it can {'control' if write else 'watch'} the run (prefer the default "
              "127.0.0.1 and an SSH tunnel)", file=sys.stderr)
    print(f"swarm-tui: the console on http://{host}:{port} "
          f"({'read-write' if write else 'read-only'}); Ctrl-C stops serving",
          file=sys.stderr)
    server = Server(command, host=host, port=port, title="swarm-tui")
    try:
        server.serve()
    except OSError as e:
        raise UserError(f"serve {host}:{port}: cannot listen: {e.strerror or e}") from None
