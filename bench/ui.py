"""The console under load, in a real pseudo-terminal (80x24, TERM=xterm-256color).

1. 1,000 agents streaming at once on the simulator (fixed:4000, so every call streams
   for seconds): key-press to screen-update latency p50/p99 (press `?`, time until
   the help text reaches the terminal; `escape` closes it), and the console
   process's CPU share next to a headless run of the same workload measured in
   the same run (the difference is what the console costs).
2. 100 agents: bytes written to the terminal per second (target <= 30 KB/s).
3. With --split: the same presses with the engine in its own process (a headless run,
   the console attached with `watch --write`), to weigh the issue's "own process" option.

    python bench/ui.py [--presses 60] [--split]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import pty
import select
import sqlite3
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


class Console:
    """`swarm-tui run …` (console mode) on a pty; collects everything it writes."""

    def __init__(self, args: list[str], db: Path, cols: int = 80, rows: int = 24,
                 env: dict[str, str] | None = None) -> None:
        env = {**os.environ, "TERM": "xterm-256color", "SWARM_TUI_DB": str(db),
               "COLUMNS": str(cols), "LINES": str(rows), **(env or {})}
        env.pop("CI", None)
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execvpe(sys.executable, [sys.executable, "-m", "swarm_tui", *args], env)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.chunks: list[tuple[float, bytes]] = []
        self.lock = threading.Lock()
        self.alive = True
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while self.alive:
            r, _, _ = select.select([self.fd], [], [], 0.2)
            if not r:
                continue
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                break
            if not data:
                break
            with self.lock:
                self.chunks.append((time.perf_counter(), data))

    def bytes_since(self, t: float) -> int:
        with self.lock:
            return sum(len(d) for at, d in self.chunks if at >= t)

    def wait_for(self, needle: bytes, since: float, timeout: float = 10.0) -> float | None:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            with self.lock:
                buf = b"".join(d for at, d in self.chunks if at >= since)
                if needle in buf:
                    # time of the chunk that completed the needle
                    acc = b""
                    for at, d in self.chunks:
                        if at >= since:
                            acc += d
                            if needle in acc:
                                return at
            time.sleep(0.002)
        return None

    def press(self, keys: bytes) -> float:
        t = time.perf_counter()
        os.write(self.fd, keys)
        return t

    def stop(self) -> None:
        for keys in (b"x", b"y"):  # cancel the run (asks), then quit
            self.press(keys)
            time.sleep(0.5)
        self.press(b"q")
        time.sleep(0.3)
        self.press(b"y")
        for _ in range(100):
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                break
            time.sleep(0.1)
        else:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        self.alive = False


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(p / 100 * len(values)) - 1))]


SWARM = ["--demo", "20000", "--concurrency", "1000", "--sim-profile", "fixed:4000",
         "--sim-rate-429", "0", "--sim-rate-503", "0"]


def _presses(con: Console, presses: int) -> tuple[list[float], float, float]:
    """(latencies in ms, the console's CPU share, wall) of `presses` help-screen round trips."""
    if con.wait_for(b"RUNNING", 0.0, 30) is None:
        raise RuntimeError("console did not start")
    time.sleep(5)  # 1,000 calls in flight and streaming
    lat = []
    c0, t0 = cpu_ticks(con.pid), time.perf_counter()
    for _ in range(presses):
        t = con.press(b"?")
        seen = con.wait_for(b"Show the key bindings", t, 5)
        if seen is not None:
            lat.append((seen - t) * 1000)
        time.sleep(0.15)
        con.press(b"\x1b")
        time.sleep(0.35)
    wall = time.perf_counter() - t0
    cpu = (cpu_ticks(con.pid) - c0) / os.sysconf("SC_CLK_TCK")
    return lat, cpu / wall, wall


def key_latency(db: Path, presses: int, env: dict[str, str] | None = None
                ) -> tuple[list[float], float, float]:
    con = Console(["run", *SWARM], db, env=env)
    try:
        return _presses(con, presses)
    finally:
        con.stop()


def _has_running_run(db: Path) -> bool:
    try:
        with contextlib.closing(sqlite3.connect(db)) as c:
            return bool(c.execute("SELECT 1 FROM runs WHERE status='running'").fetchone())
    except sqlite3.Error:  # not created yet
        return False


def split_latency(db: Path, presses: int) -> tuple[list[float], float, float]:
    """The engine in its own process: a headless run, the console attached to it."""
    env = {**os.environ, "SWARM_TUI_DB": str(db)}
    proc = subprocess.Popen([sys.executable, "-m", "swarm_tui", "run", *SWARM, "--headless",
                             "--quiet"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not _has_running_run(db):  # watch needs a running run to attach to
        time.sleep(0.1)
    con = Console(["watch", "--write"], db)
    try:
        return _presses(con, presses)
    finally:
        con.stop()  # cancels the run through the store (--write), then quits
        proc.send_signal(2)
        proc.wait(60)


def headless_cpu(db: Path, seconds: float) -> float:
    env = {**os.environ, "SWARM_TUI_DB": str(db)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", "--demo", "20000", "--concurrency", "1000",
         "--sim-profile", "fixed:4000", "--sim-rate-429", "0", "--sim-rate-503", "0",
         "--headless", "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(8)
    c0, t0 = cpu_ticks(proc.pid), time.perf_counter()
    time.sleep(seconds)
    share = (cpu_ticks(proc.pid) - c0) / os.sysconf("SC_CLK_TCK") / (time.perf_counter() - t0)
    proc.send_signal(2)
    proc.wait(60)
    return share


def output_rate(db: Path, seconds: float = 10.0) -> float:
    args = ["run", "--demo", "100000", "--concurrency", "100", "--sim-profile", "gateway",
            "--sim-rate-429", "0.003", "--sim-rate-503", "0.003"]
    con = Console(args, db)
    try:
        con.wait_for(b"RUNNING", 0.0, 30)
        time.sleep(3)
        t = time.perf_counter()
        time.sleep(seconds)
        return con.bytes_since(t) / (time.perf_counter() - t)
    finally:
        con.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presses", type=int, default=60)
    ap.add_argument("--split", action="store_true",
                    help="also measure the engine in its own process (watch --write)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # baseline in the same run: CPython's own collector (thresholds, no parking: runtime.py)
        lat0, share0, _ = key_latency(Path(tmp) / "a0.db", a.presses,
                                      {"SWARM_TUI_GC_THRESHOLDS": "700,10,10",
                                       "SWARM_TUI_GC_PARK_S": "0"})
        lat, share, wall = key_latency(Path(tmp) / "a.db", a.presses)
        base = headless_cpu(Path(tmp) / "b.db", wall)
        rate = output_rate(Path(tmp) / "c.db")
        split = split_latency(Path(tmp) / "s.db", a.presses) if a.split else None
    print("1. 1,000 agents streaming (fixed:4000), console on a pty at 80x24")
    print(f"   key-press -> screen update: p50 {pct(lat, 50):.0f} ms, p99 {pct(lat, 99):.0f} ms "
          f"over {len(lat)}/{a.presses} presses (target p99 <= 100 ms)")
    print(f"   with CPython's default GC thresholds, same run: p50 {pct(lat0, 50):.0f} ms, "
          f"p99 {pct(lat0, 99):.0f} ms ({len(lat0)}/{a.presses}); p99 ratio tuned/default "
          f"{pct(lat, 99) / pct(lat0, 99):.2f}")
    print(f"   CPU share: console process {share * 100:.0f}% of a core (default GC "
          f"{share0 * 100:.0f}%); headless run of the same workload {base * 100:.0f}%; the "
          f"console costs {(share - base) * 100:+.0f} points")
    print("2. 100 agents on the gateway profile, console on a pty at 80x24")
    print(f"   terminal output: {rate / 1024:.1f} KB/s (target <= 30 KB/s)")
    if split is not None:
        sl, sshare, _ = split
        print("3. the engine in its own process (headless run + `watch --write`), same workload")
        print(f"   key-press -> screen update: p50 {pct(sl, 50):.0f} ms, p99 {pct(sl, 99):.0f} ms "
              f"over {len(sl)}/{a.presses} presses; p99 ratio split/in-process "
              f"{pct(sl, 99) / pct(lat, 99):.2f}; console {sshare * 100:.0f}% of a core")


if __name__ == "__main__":
    main()
