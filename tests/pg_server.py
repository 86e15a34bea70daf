"""A throwaway PostgreSQL for the suite: initdb + pg_ctl from the OS package, on loopback.

The cluster lives in a fresh directory, listens on a free port of 127.0.0.1 and on a
socket in that directory, trusts local connections (nothing but this suite can reach
it) and runs with fsync off (its data is thrown away). As root, initdb refuses to run:
the server then runs as the `postgres` account the OS package creates.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def pg_tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in PG_BIN_DIRS:
        if (d / name).exists():
            return str(d / name)
    return None


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThrowawayPostgres:
    def __init__(self, durable: bool = False,
                 tls: tuple[bytes, bytes] | None = None) -> None:
        # durable: commits acknowledged only once in the WAL (PostgreSQL's default). The
        # suite's server skips that for speed; a server crashed on purpose must not (an
        # asynchronous commit's last ~0.6 s is lost by `stop -m immediate`)
        self.durable = durable
        self.tls = tls  # (certificate chain, key) in PEM: the server also speaks TLS
        initdb, pg_ctl = pg_tool("initdb"), pg_tool("pg_ctl")
        if not initdb or not pg_ctl:
            raise FileNotFoundError("initdb/pg_ctl not found (apt-get install postgresql)")
        self.initdb, self.pg_ctl = initdb, pg_ctl
        self.dir = Path(tempfile.mkdtemp(prefix="swarm-tui-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                        "--clear-groups", "--"]
        self.superuser = "postgres"

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as, *args], check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=self.dir)

    def start(self) -> None:
        self._run(self.initdb, "-D", str(self.data), "-U", self.superuser, "-A", "trust",
                  "-E", "UTF8", "--no-sync")
        if self.tls is not None:  # the server's own files: its account's, mode 0600
            for name, pem in zip(("server.crt", "server.key"), self.tls, strict=True):
                path = self.data / name
                path.write_bytes(pem)
                path.chmod(0o600)
                if self._as:
                    user = pwd.getpwnam("postgres")
                    os.chown(path, user.pw_uid, user.pw_gid)
        self.start_again()

    def start_again(self) -> None:
        """Start the server on its data (after `crash`): same port, same databases."""
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                f"-c synchronous_commit={'on' if self.durable else 'off'} "
                "-c full_page_writes=off -c max_connections=200"
                + (" -c ssl=on" if self.tls is not None else ""))
        self._run(self.pg_ctl, "-D", str(self.data), "-o", opts, "-l",
                  str(self.dir / "server.log"), "-w", "-t", "60", "start")

    def crash(self) -> None:
        """`pg_ctl stop -m immediate`: every backend gone at once, as in a server crash."""
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def url(self, database: str = "postgres", user: str | None = None) -> str:
        return f"postgresql://{user or self.superuser}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)
