"""Helpers shared by the benchmarks: the simulator in its own process, CPU accounting."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def sim_process(*flags: str) -> Iterator[str]:
    """`swarm-tui sim` in a separate process; yields its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "sim", "--port", str(port), "--rate-429", "0",
         "--rate-503", "0", *flags],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if "SIMULATED" not in line:
            raise RuntimeError(f"simulator did not start: {line!r}")
        url = f"http://127.0.0.1:{port}/v1"
        for _ in range(50):
            with contextlib.suppress(httpx2.HTTPError):
                httpx2.get(url.replace("/v1", "/sim/stats"), timeout=1)
                break
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def cpu_seconds() -> float:
    """User + system CPU of this process (threads included)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def run_child(script: str, *args: str) -> str:
    """Run one measured client in a fresh process so variants do not share warm state."""
    r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "PYTHONHASHSEED": "0"})
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return r.stdout.strip().splitlines()[-1]
