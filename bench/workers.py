"""One process or several: a run split across worker processes (`run --workers N`).

20,000 tasks at 1,000 calls in flight on the simulator's fixed:200 profile (the simulator
in its own process), executed by `--workers 1` (the baseline, measured in the same
invocation) and `--workers 2`, alternated; plus the plain one-process `run` for scale.
Prints wall time over the ideal (tasks / in-flight x 200 ms), the wall ratio against
the baseline, and the client CPU per call (every swarm-tui process of the run, from
getrusage of the waited-for children).

    python bench/workers.py [--tasks 20000] [--concurrency 1000] [--rounds 2] [--capped]
                            [--db postgresql://...]   (default: a fresh SQLite file each)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import sim_process

KEY = "sk-bench-0123456789abcdefghijklmnop"


def sim_cpu(port: str) -> float:
    """CPU seconds of the simulator process serving `port` (it is not our child's child)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            if b"sim" in argv and port.encode() in argv:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            continue
    return 0.0


def postgres_cpu() -> float:
    """CPU seconds of this host's PostgreSQL server processes (0 without one): with
    --db on this machine it shares the 2 cores with the client and the simulator."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                head, rest = fh.read().rsplit(")", 1)
            if head.split("(", 1)[1] == "postgres":
                fields = rest.split()
                # its own CPU and its exited children's (the backends of closed connections
                # end up in the postmaster's cutime/cstime)
                total += sum(int(x) for x in fields[11:15])
        except (OSError, IndexError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def one(workload: Path, cfg: Path, db: str, concurrency: int, workers: int | None,
        port: str, budget: float | None = None) -> tuple[float, float, int, float, float]:
    """(wall s, CPU s of every process of the run, calls, the simulator's CPU s, the
    database server's CPU s)."""
    argv = [sys.executable, "-m", "swarm_tui", "--db", db, "run", str(workload), "--config",
            str(cfg), "--concurrency", str(concurrency), "--headless", "--json", "--quiet",
            "--no-preflight"]
    if workers is not None:
        argv += ["--workers", str(workers)]
    if budget is not None:
        argv += ["--budget", str(budget)]
    c0, s0, p0, t0 = children_cpu(), sim_cpu(port), postgres_cpu(), time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "GW_KEY": KEY}, stdin=subprocess.DEVNULL)
    wall, cpu, sim = time.perf_counter() - t0, children_cpu() - c0, sim_cpu(port) - s0
    server = postgres_cpu() - p0
    if r.returncode not in (0, 3):
        raise RuntimeError(r.stderr[-2000:])
    summary = json.loads(r.stdout)
    if summary["succeeded"] != summary["total"]:
        raise RuntimeError(f"not every task succeeded: {summary['succeeded']}")
    return wall, cpu, int(summary["calls"]), sim, server


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--db", help="a PostgreSQL URL (each variant's run goes into it)")
    ap.add_argument("--capped", action="store_true",
                    help="also `--workers 2 --budget 1000` (never reached): what drawing "
                    "the shared cap through the store costs")
    a = ap.parse_args()
    ideal = a.tasks / a.concurrency * 0.2
    with tempfile.TemporaryDirectory() as tmp, sim_process("--profile", "fixed:200") as url:
        work = Path(tmp) / "w.jsonl"
        with work.open("w") as fh:
            for i in range(a.tasks):
                fh.write(json.dumps({"id": f"t{i:06d}", "prompt": f"task {i}: summarise",
                                     "max_tokens": 64}) + "\n")
        cfg = Path(tmp) / "c.toml"
        cfg.write_text(f'[gateways.local]\nbase_url = "{url}"\nkey_env = ["GW_KEY"]\n'
                       f"max_concurrency = {a.concurrency}\n")
        variants: dict[str, list[tuple[float, float, int, float, float]]] = {}
        port = url.rsplit(":", 1)[1].split("/")[0]
        n = 0
        for _ in range(a.rounds):
            plan: list[tuple[str, int | None, float | None]] = [
                ("--workers 1", 1, None), ("--workers 2", 2, None), ("one process", None, None)]
            if a.capped:
                plan.append(("2, capped", 2, 1000.0))
            for name, workers, budget in plan:
                n += 1
                db = a.db or str(Path(tmp) / f"{n}.db")
                variants.setdefault(name, []).append(
                    one(work, cfg, db, a.concurrency, workers, port, budget))
    base = min(r[0] for r in variants["--workers 1"])
    cores = os.cpu_count() or 1
    print(f"{a.tasks:,} tasks, {a.concurrency:,} in flight, fixed:200 (ideal wall "
          f"{ideal:.1f} s), simulator in its own process, {cores} cores")
    for name, runs in variants.items():
        best = min(runs)
        wall, cpu, calls, sim, server = best
        walls = ", ".join(f"{r[0]:.1f}" for r in runs)
        print(f"  {name:12s} wall {walls} s  best/ideal {wall / ideal:.2f}  "
              f"ratio to --workers 1: {wall / base:.2f}  client CPU {cpu / calls * 1000:.2f} "
              f"ms/call, simulator {sim / calls * 1000:.2f}, PostgreSQL server "
              f"{server / calls * 1000:.2f}; the machine "
              f"{(cpu + sim + server) / (wall * cores) * 100:.0f}% busy")


if __name__ == "__main__":
    main()
