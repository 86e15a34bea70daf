"""What one more worker process costs (issue 34: "a worker starts in ≤ 0.5 s of CPU").

The same 2-task run started as `run --workers 1` and as `run --workers 3` (the simulator in
its own process, a fresh SQLite file each), alternated over rounds: the difference in CPU
of every swarm-tui process of the run (getrusage of the waited-for children), halved, is
what one worker costs from its exec to its exit — its imports, config, store, preflight,
leases and teardown, with at most one call. That bounds its start from above. From below:
`swarm-tui worker` on a store whose one run is not split into batches — it imports all a
worker imports, loads the config, opens the store, finds no run to join and exits 2: a
worker's start short of its preflight, its first lease and its first call. And the start
itself: a worker joining a split run under way (its calls held 3 s by the simulator), its
CPU read from /proc the moment it has a connection open to the gateway (its preflight's
GET /models, before it joins or leases), then killed (a SIGTERM would cancel the run for
its other worker too). The baseline, measured in the
same run: `python -c pass`.

    python bench/worker_start.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import sim_process

KEY = "sk-bench-0123456789abcdefghijklmnop"


def children_cpu(argv: list[str], env: dict[str, str], ok: tuple[int, ...] = (0, 3)) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode not in ok:
        raise RuntimeError(r.stderr[-2000:])
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def _sockets_to(port: int) -> set[str]:
    """Inodes of the TCP sockets connected to 127.0.0.1:port (either state but listening)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if int(cols[2].rsplit(":", 1)[1], 16) == port and cols[3] != "0A":
                    found.add(cols[9])
    return found


def _cpu_s(pid: int) -> float:
    """The process's CPU so far, every thread: from the scheduler's own count in ns
    (/proc/PID/task/*/schedstat), not /proc/PID/stat's 10 ms ticks; the ticks where the
    kernel keeps no schedstat."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        if total:
            return total / 1e9
    except (OSError, ValueError, IndexError):
        pass
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_at_first_connection(argv: list[str], env: dict[str, str], port: int) -> float:
    """A process's CPU when it first holds a socket connected to the gateway's port."""
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"worker ended first: {proc.stderr.read()[-2000:]}")
            try:
                mine = {os.readlink(f"/proc/{proc.pid}/fd/{fd}")[8:-1]
                        for fd in os.listdir(f"/proc/{proc.pid}/fd")}
            except OSError:
                continue
            if mine & _sockets_to(port):
                return _cpu_s(proc.pid)
            time.sleep(0.002)
        raise RuntimeError("the worker never connected to the gateway")
    finally:
        proc.kill()
        proc.wait()


def start_to_connection(a: argparse.Namespace, env: dict[str, str], tmp: str) -> list[float]:
    """Each round a worker joins the same split run, its first connection timed in CPU."""
    with sim_process("--profile", "fixed:3000") as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        cfg = Path(tmp) / "slow.toml"
        cfg.write_text(f'[gateways.local]\nbase_url = "{url}"\nkey_env = ["BENCH_KEY"]\n')
        db = Path(tmp) / "split.db"
        env = {**env, "SWARM_TUI_DB": str(db)}
        swarm = [sys.executable, "-m", "swarm_tui", "--config", str(cfg)]
        starter = subprocess.Popen(
            [*swarm, "run", "--demo", "5000", "--headless", "--quiet", "--workers", "1",
             "--concurrency", "20"], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            run_id = None
            deadline = time.monotonic() + 60
            while run_id is None and time.monotonic() < deadline:
                time.sleep(0.2)
                try:
                    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
                        row = c.execute("SELECT id FROM runs WHERE status='running'").fetchone()
                        calls = c.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
                    run_id = row[0] if row and calls else None
                except sqlite3.Error:
                    pass
            if run_id is None:
                raise RuntimeError("the split run did not start")
            return [cpu_at_first_connection([*swarm, "worker", run_id, "--quiet"], env, port)
                    for _ in range(a.rounds)]
        finally:
            starter.send_signal(signal.SIGINT)
            try:
                starter.wait(timeout=120)
            except subprocess.TimeoutExpired:
                starter.kill()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    with sim_process("--profile", "fixed:50") as url, tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "c.toml"
        cfg.write_text(f'[gateways.local]\nbase_url = "{url}"\nkey_env = ["BENCH_KEY"]\n')
        # as installed: compiled modules cached (see bench/startup.py)
        env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
               "BENCH_KEY": KEY, "XDG_CONFIG_HOME": tmp}
        pass_cpu, one, three, joins_nothing = [], [], [], []
        swarm = [sys.executable, "-m", "swarm_tui", "--config", str(cfg)]
        for i in range(a.rounds):
            pass_cpu.append(children_cpu([sys.executable, "-c", "pass"], env))
            # a store whose one run is a plain (not split) one, made once
            env["SWARM_TUI_DB"] = str(Path(tmp) / "plain.db")
            if i == 0:
                children_cpu([*swarm, "run", "--demo", "2", "--headless", "--quiet"], env)
            joins_nothing.append(children_cpu([*swarm, "worker", "--quiet"], env, ok=(2,)))
            for workers, into in ((1, one), (3, three)):
                env["SWARM_TUI_DB"] = str(Path(tmp) / f"runs-{i}-{workers}.db")
                into.append(children_cpu(
                    [sys.executable, "-m", "swarm_tui", "--config", str(cfg), "run", "--demo",
                     "2", "--headless", "--quiet", "--workers", str(workers)], env))
        started = start_to_connection(a, env, tmp)
    base = statistics.median(pass_cpu)
    per_worker = [(t - o) / 2 for o, t in zip(one, three, strict=True)]
    w = statistics.median(per_worker)
    print(f"python -c pass: {base * 1000:.0f} ms of CPU (median of {a.rounds})")
    print(f"run --workers 1: {statistics.median(one) * 1000:.0f} ms, --workers 3: "
          f"{statistics.median(three) * 1000:.0f} ms (every process of the run)")
    print(f"one more worker, exec to exit: median {w * 1000:.0f} ms of CPU "
          f"(rounds: {', '.join(f'{x * 1000:.0f}' for x in per_worker)}) = "
          f"{w / base:.1f}x python -c pass; target ≤ 500 ms: "
          f"{'met' if w <= 0.5 else 'missed'}")
    j = statistics.median(joins_nothing)
    print(f"a worker that finds no run to join, exec to exit: median {j * 1000:.0f} ms of CPU "
          f"(rounds: {', '.join(f'{x * 1000:.0f}' for x in joins_nothing)}) = "
          f"{j / base:.1f}x python -c pass")
    st = statistics.median(started)
    print(f"a worker's start, exec to its first connection to the gateway: median "
          f"{st * 1000:.0f} ms of CPU (rounds: {', '.join(f'{x * 1000:.0f}' for x in started)})"
          f" = {st / base:.1f}x python -c pass; target ≤ 500 ms: "
          f"{'met' if st <= 0.5 else 'missed'}")


if __name__ == "__main__":
    main()
