"""The write-ahead log's peak size during a run (issue 34: the README states 64 MiB).

Samples the `-wal` file every 50 ms while the real `swarm-tui run --demo N --headless`
runs (its simulator in its own process). Prints the peak and the size once a second.

    python bench/wal.py [--tasks 100000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

LIMIT_MIB = 64


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=100_000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "runs.db")
        peak, series, done = [0], [], threading.Event()
        t0 = time.monotonic()

        def sample() -> None:
            while not done.is_set():
                try:
                    size = os.path.getsize(db + "-wal")
                except OSError:
                    size = 0
                peak[0] = max(peak[0], size)
                series.append((time.monotonic() - t0, size))
                time.sleep(0.05)

        th = threading.Thread(target=sample)
        th.start()
        r = subprocess.run([sys.executable, "-m", "swarm_tui", "run", "--demo", str(a.tasks),
                            "--headless", "--quiet", "--concurrency", "400",
                            "--sim-profile", "fixed:100", "--rate", "0"],
                           env={**os.environ, "SWARM_TUI_DB": db}, capture_output=True,
                           text=True, stdin=subprocess.DEVNULL)
        done.set()
        th.join()
    wall = time.monotonic() - t0
    print(f"{a.tasks:,} tasks: exit {r.returncode}, wall {wall:.0f} s, WAL peak "
          f"{peak[0] / 2**20:.0f} MiB (stated limit {LIMIT_MIB} MiB: "
          f"{peak[0] / 2**20 / LIMIT_MIB:.2f}x)")
    per_s = {int(t): s for t, s in series}
    print("MiB by second:", " ".join(f"{per_s[k] >> 20}" for k in sorted(per_s)))


if __name__ == "__main__":
    main()
