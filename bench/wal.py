"""The write-ahead log's peak size during a run (issue 34: the README states 64 MiB).

Samples the `-wal` file every 50 ms while the real `swarm-tui run --demo N --headless`
runs (its simulator in its own process). Prints the peak and the size once a second.
`--pinned-reader`: another process enters a read of the database once the run has 500
results and stops there (SIGSTOP), as an `sqlite3` shell left in BEGIN would hold it; the
run's warnings are printed (it names that reader once past `[store] wal_warn_mib`).

    python bench/wal.py [--tasks 100000] [--pinned-reader]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

LIMIT_MIB = 64


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--pinned-reader", action="store_true",
                    help="a reader stopped inside a read from the run's 500th result")
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
        run = subprocess.Popen([sys.executable, "-m", "swarm_tui", "run", "--demo",
                                str(a.tasks), "--headless", "--quiet", "--concurrency", "400",
                                "--sim-profile", "fixed:100", "--rate", "0"],
                               env={**os.environ, "SWARM_TUI_DB": db}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        reader = _pin(db) if a.pinned_reader else None
        _out, err = run.communicate()
        if reader is not None:
            reader.kill()
            reader.wait()
        done.set()
        th.join()
    wall = time.monotonic() - t0
    for line in err.splitlines():
        if "warning" in line:
            print(line)
    print(f"{a.tasks:,} tasks{' (a reader pinned)' if a.pinned_reader else ''}: exit "
          f"{run.returncode}, wall {wall:.0f} s, WAL peak "
          f"{peak[0] / 2**20:.0f} MiB (stated limit {LIMIT_MIB} MiB: "
          f"{peak[0] / 2**20 / LIMIT_MIB:.2f}x)")
    per_s = {int(t): s for t, s in series}
    print("MiB by second:", " ".join(f"{per_s[k] >> 20}" for k in sorted(per_s)))


PIN = """import os, signal, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN")
c.execute("SELECT COUNT(*) FROM results").fetchone()
print("reading", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


def _pin(db: str) -> subprocess.Popen:
    while True:  # the run's first 500 results, read past the store
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
                if c.execute("SELECT COUNT(*) FROM results").fetchone()[0] >= 500:
                    break
        except sqlite3.Error:
            pass
        time.sleep(0.1)
    reader = subprocess.Popen([sys.executable, "-c", PIN, db], stdout=subprocess.PIPE,
                              text=True)
    assert reader.stdout is not None and reader.stdout.readline() == "reading\n"
    return reader


if __name__ == "__main__":
    main()
