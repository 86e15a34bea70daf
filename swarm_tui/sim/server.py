"""Serve the simulator with uvicorn: in a child process (for `run` and the console),
in a background thread (tests), or in the foreground (`swarm-tui sim`).

`run` uses a child process, not a thread: measured on 2 cores, a simulator thread
starved of the GIL by a 100-call burst received requests up to 60 ms late, which
the client then saw as gateway latency (p50 223 vs 191 ms in a separate process).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

from swarm_tui.sim.settings import SimSettings

if TYPE_CHECKING:
    import uvicorn

    from swarm_tui.sim.app import SimApp

# uvicorn and the app are imported where a server is made: a run against the simulator
# only starts its child process, and a run or worker against a gateway never serves one —
# uvicorn (with click, watchfiles, anyio) was ~50 ms of every run's and worker's start


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _config(app: SimApp, log_level: str) -> uvicorn.Config:
    import uvicorn

    return uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="off",
        http="httptools",
        loop="auto",
        timeout_graceful_shutdown=1,
        timeout_keep_alive=30,
        backlog=2048,
    )


class SimServer:
    """The simulator on a free loopback port, in a daemon thread with its own event loop."""

    def __init__(self, settings: SimSettings | None = None, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        import uvicorn

        from swarm_tui.sim.app import SimApp

        self.app = SimApp(settings)
        self._sock = _bind(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        self._server = uvicorn.Server(_config(self.app, "critical"))
        self._thread = threading.Thread(target=self._run, name="swarm-sim", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def _run(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._sock]))

    def start(self) -> SimServer:
        self._thread.start()
        while not self._server.started and self._thread.is_alive():
            threading.Event().wait(0.01)
        if not self._server.started:
            raise RuntimeError("simulator failed to start")
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._sock.close()


@contextlib.contextmanager
def running_sim(settings: SimSettings | None = None) -> Iterator[SimServer]:
    server = SimServer(settings).start()
    try:
        yield server
    finally:
        server.stop()


def serve_forever(settings: SimSettings, host: str, port: int) -> None:
    """Foreground server for `swarm-tui sim`; prints the base URL once listening."""
    import uvicorn

    from swarm_tui.sim.app import SimApp

    sock = _bind(host, port)
    app = SimApp(settings)
    server = uvicorn.Server(_config(app, "warning"))
    bound = sock.getsockname()
    print(f"swarm-tui simulator (SIMULATED) on http://{bound[0]}:{bound[1]}/v1 "
          f"profile={settings.profile}", flush=True)
    server.run(sockets=[sock])


def _exit_when_parent_goes() -> None:
    """Child side of SimProcess: stdin closes when the parent exits, even on SIGKILL."""
    with contextlib.suppress(Exception):
        sys.stdin.read()
    os._exit(0)


def serve_child(host: str = "127.0.0.1") -> None:
    """`swarm-tui sim --stdin-control`: settings as one JSON line on stdin, port 0."""
    settings = SimSettings.model_validate_json(sys.stdin.readline())
    threading.Thread(target=_exit_when_parent_goes, daemon=True).start()
    serve_forever(settings, host, 0)


class SimProcess:
    """The simulator in a child process on a free loopback port."""

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self.base_url = ""
        self._proc: subprocess.Popen[str] | None = None

    def start(self, timeout_s: float = 20.0) -> SimProcess:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "swarm_tui", "sim", "--stdin-control"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            start_new_session=True,  # Ctrl-C goes to the run, which cancels cleanly first
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(self.settings.model_dump_json() + "\n")
        self._proc.stdin.flush()
        line = _readline_with_timeout(self._proc.stdout, timeout_s)
        m = re.search(r"(http://[^ ]+/v1)", line)
        if not m:
            self.stop()
            raise RuntimeError(f"simulator did not start: {line.strip()!r}")
        self.base_url = m.group(1)
        return self

    def stop(self) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._proc.stdin.close()  # type: ignore[union-attr]
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)
        with contextlib.suppress(OSError, ValueError):
            self._proc.stdout.close()  # type: ignore[union-attr]
        self._proc = None


def _readline_with_timeout(stream: IO[str], timeout_s: float) -> str:
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return result[0] if result else ""
