"""Serve the simulator with uvicorn: in a background thread (for `run`, the console
and tests) or in the foreground (`swarm-tui sim`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator

import uvicorn

from swarm_tui.sim.app import SimApp
from swarm_tui.sim.settings import SimSettings


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _config(app: SimApp, log_level: str) -> uvicorn.Config:
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


def serve_forever(settings: SimSettings, host: str, port: int, ready: bool = True) -> None:
    """Foreground server for `swarm-tui sim`; prints the base URL once listening."""
    sock = _bind(host, port)
    app = SimApp(settings)
    server = uvicorn.Server(_config(app, "warning"))
    if ready:
        bound = sock.getsockname()
        print(f"swarm-tui simulator (SIMULATED) on http://{bound[0]}:{bound[1]}/v1 "
              f"profile={settings.profile}", flush=True)
    server.run(sockets=[sock])
