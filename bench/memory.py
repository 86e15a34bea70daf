"""Peak memory of a headless run as it grows, and what reading it back costs.

Each size is the real `swarm-tui run --demo N --headless` (the simulator in its own
process, `fixed:20`, 200 in flight); peak RSS is the run process's high-water mark
(VmHWM, read just before it exits). Then `report --json` and `cost --json` of each run,
timed against the 1,000-task run of the same invocation.

    python bench/memory.py [--sizes 1000,20000,100000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def peak_rss_mb(db: Path, n: int) -> tuple[float, float]:
    """(peak RSS MB, wall s) of `run --demo n --headless`."""
    env = {**os.environ, "SWARM_TUI_DB": str(db)}
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", "--demo", str(n), "--headless", "--quiet",
         "--sim-profile", "fixed:20", "--concurrency", "200", "--sim-rate-429", "0",
         "--sim-rate-503", "0"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL)
    hwm = 0.0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        hwm = max(hwm, int(line.split()[1]) / 1024)
        except OSError:
            pass
        time.sleep(0.2)
    if proc.returncode not in (0, 3):
        raise RuntimeError(f"run --demo {n}: exit {proc.returncode}: "
                           f"{proc.stderr.read().decode()[-500:] if proc.stderr else ''}")
    return hwm, time.perf_counter() - t


def read_back_s(db: Path, verb: str, best_of: int = 3) -> float:
    env = {**os.environ, "SWARM_TUI_DB": str(db)}
    runs = subprocess.run([sys.executable, "-m", "swarm_tui", "runs", "--json", "--limit", "1"],
                          env=env, capture_output=True, text=True, check=True)
    run_id = __import__("json").loads(runs.stdout)[0]["id"]
    best = float("inf")
    for _ in range(best_of):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "swarm_tui", verb, run_id, "--json"], env=env,
                       stdout=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,20000,100000")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            db = Path(tmp) / f"m{n}.db"
            rss, wall = peak_rss_mb(db, n)
            rows.append((n, rss, wall, read_back_s(db, "report"), read_back_s(db, "cost")))
            print(f"  {n:>7,} tasks: peak RSS {rss:6.1f} MB  wall {wall:5.1f} s", flush=True)
    n0, rss0, _, rep0, cost0 = rows[0]
    print(f"peak RSS of `run --demo N --headless` (fixed:20, 200 in flight); "
          f"report/cost --json against the {n0:,}-task run:")
    for n, rss, _, rep, cost in rows:
        per = (rss - rss0) / (n - n0) * 1024 if n != n0 else 0.0
        print(f"  {n:>7,} tasks: {rss:6.1f} MB ({per:4.2f} KB per task over the {n0:,} run)  "
              f"report {rep:.2f} s = {rep / rep0:.2f}x  cost {cost:.2f} s = {cost / cost0:.2f}x")
    print("targets: 100,000 tasks <= 300 MB; report/cost of it <= 2x the 1,000-task run")


if __name__ == "__main__":
    main()
