"""A spent quota under a loaded core: how many 429s the demo's key draws before it cools.

The console demo's gateway runs demo-key-a's quota out 8 s into the run (every call on
it a 429 saying nothing remains, Retry-After: the time left). What the client does next
should not depend on how busy its machine is: one refusal read, the key-model cools. Runs
`swarm-tui run --demo 1200 --sim-incidents --rate 100` pinned to one core, quiet and then
sharing that core with BUSY busy loops, and prints, for each, the 429s on the key before
its first "quota spent" cooldown and in all.

    python bench/quota_under_load.py [BUSY]      (default 16)
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time


def _busy() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda:
                            os.sched_setaffinity(0, {0}))


def one_run(busy: int) -> tuple[int, int, float | None, int]:
    loops = [_busy() for _ in range(busy)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "SWARM_TUI_DB": f"{tmp}/runs.db", "XDG_CONFIG_HOME": f"{tmp}/x"}
            r = subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "swarm_tui", "run",
                                "--demo", "1200", "--sim-incidents", "--rate", "100",
                                "--headless", "--quiet", "--json", "--sim-seed", "5"],
                               capture_output=True, text=True, env=env, timeout=600,
                               stdin=subprocess.DEVNULL)
            succeeded = json.loads(r.stdout)["succeeded"]
            db = sqlite3.connect(f"{tmp}/runs.db")
            row = db.execute("SELECT MIN(at) FROM events WHERE kind='control' AND "
                             "detail_json LIKE '%quota spent%'").fetchone()
            first = row[0]
            limited = db.execute("SELECT sent_at FROM attempts WHERE error_class="
                                 "'rate_limited' ORDER BY sent_at").fetchall()
            start = db.execute("SELECT started_at FROM runs").fetchone()[0]
            before = sum(1 for (t,) in limited if first is None or t < first)
            db.close()
            return before, len(limited), None if first is None else first - start, succeeded
    finally:
        for p in loops:
            p.kill()
            p.wait()


def main() -> None:
    busy = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    print("demo 1200 tasks at 100/s on core 0; demo-key-a's quota out from 8 s to 16 s")
    print(f"{'core 0':<28}{'429s before cooling':>20}{'429s in all':>13}"
          f"{'first cooling':>15}{'succeeded':>11}")
    for n in (0, busy):
        t0 = time.perf_counter()
        before, total, first, ok = one_run(n)
        at = "none" if first is None else f"{first:.1f} s"
        print(f"{'quiet' if n == 0 else f'shared with {n} busy loops':<28}{before:>20}{total:>13}"
              f"{at:>15}{ok:>11}   ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
