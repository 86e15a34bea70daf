"""Seeking a stored run to a moment (issue 35): `replay --at` on a 100,000-task run.

Makes the run (the real `swarm-tui run --demo N --headless`, its simulator in its own
process) unless --db names one, then in a fresh process per moment builds the console's
snapshot at 10 moments spread over the run and prints how long each seek took and the
process's peak RSS. The baseline, measured in the same run, is the replay at the end (what
`h` → a run has always done).

    python bench/replay.py [--tasks 100000] [--db FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def seek(db: str, run_id: str, at: float | None) -> None:
    import asyncio

    from swarm_tui.run_sources import StoreSource

    async def go() -> float:
        t0 = time.perf_counter()
        s = StoreSource(Path(db), run_id, replay=True, at=at)
        await s.open()
        try:
            snap = await s.snapshot()
        finally:
            await s.close()
        assert snap is not None
        return time.perf_counter() - t0

    took = asyncio.run(go())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"s": took, "rss_mb": rss}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--db")
    ap.add_argument("--child", nargs=3)
    a = ap.parse_args()
    if a.child:
        db, run_id, at = a.child
        return seek(db, run_id, None if at == "end" else float(at))
    with tempfile.TemporaryDirectory() as tmp:
        db = a.db or os.path.join(tmp, "runs.db")
        if not a.db:
            subprocess.run([sys.executable, "-m", "swarm_tui", "run", "--demo", str(a.tasks),
                            "--headless", "--quiet", "--concurrency", "400", "--sim-profile",
                            "fixed:100", "--rate", "0", "--sim-rate-503", "0.01"],
                           env={**os.environ, "SWARM_TUI_DB": db}, check=False,
                           capture_output=True, stdin=subprocess.DEVNULL)
        c = sqlite3.connect(db)
        run_id, start, end, total = c.execute(
            "SELECT id, started_at, finished_at, total FROM runs ORDER BY started_at DESC "
            "LIMIT 1").fetchone()
        c.close()

        def child(at: str) -> dict:
            out = subprocess.run([sys.executable, __file__, "--child", db, run_id, at],
                                 capture_output=True, text=True, check=True).stdout
            return json.loads(out.strip().splitlines()[-1])

        base = child("end")
        moments = [start + (end - start) * i / 10 for i in range(1, 11)]
        seeks = [child(repr(t)) for t in moments]
    times = [s["s"] for s in seeks]
    print(f"run of {total:,} tasks, {end - start:.0f} s; replay at the end (baseline): "
          f"{base['s'] * 1000:.0f} ms, peak RSS {base['rss_mb']:.0f} MB")
    print("seek to 10 moments: " + ", ".join(f"{t * 1000:.0f}" for t in times) + " ms")
    print(f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
          f"({max(times) / base['s']:.2f}x the end); peak RSS max "
          f"{max(s['rss_mb'] for s in seeks):.0f} MB (targets: ≤ 300 ms, ≤ 300 MB)")


if __name__ == "__main__":
    main()
