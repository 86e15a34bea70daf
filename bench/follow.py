"""What watching a run costs per tick as the run grows, measured in the same run.

A headless `swarm-tui run` (its own process, its own simulator process) writes N tasks at a
fixed pace; this process watches it as the console's `watch` does (StoreSource, a tick
every 0.25 s) and records the CPU of each tick (this process, the SQLite thread included).
If a tick's cost does not grow with the run, the ticks late in the run cost what the early
ones did. Baseline, same run: a full re-read of the run (every task row + summarize, what
watch did before) at the end; and a finished replay's ticks.

    python bench/follow.py [--tasks 20000] [--rate 800]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import cpu_seconds
from swarm_tui.core.summary import summarize
from swarm_tui.run_sources import StoreSource
from swarm_tui.store.runs import get_run, task_rows


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=20_000)
    ap.add_argument("--rate", type=float, default=800.0, help="calls started per second")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    db = tmp / "runs.db"
    env = {**os.environ, "SWARM_TUI_DB": str(db), "XDG_CONFIG_HOME": str(tmp / "xdg")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", "--demo", str(a.tasks), "--headless",
         "--quiet", "--concurrency", "200", "--rate", str(a.rate), "--sim-profile", "fixed:40",
         "--no-preflight"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    while not db.exists() or os.path.getsize(db) < 4096:
        await asyncio.sleep(0.1)
    src = None
    while src is None:  # the run's row exists once the executor has stored its tasks
        try:
            s = StoreSource(db, None)
            await s.open()
            src = s
        except Exception:
            await asyncio.sleep(0.2)
    ticks: list[tuple[int, float, int]] = []  # (done at the tick, CPU ms, tasks new to it)
    first_ms = None
    seen = 0
    while True:
        c0 = cpu_seconds()
        snap = await src.snapshot()
        ms = (cpu_seconds() - c0) * 1000
        if first_ms is None:
            first_ms = ms
        elif snap is not None:
            ticks.append((snap.done, ms, snap.done - seen))
        seen = snap.done if snap is not None else seen
        if snap is not None and snap.status != "running":
            break
        await asyncio.sleep(0.25)
    proc.wait(60)
    # baseline: one full re-read of the finished run, as watch did every tick before
    assert src.conn is not None and src.run_id is not None
    c0 = cpu_seconds()
    run = await get_run(src.conn, src.run_id, db)
    rows = [r async for chunk in task_rows(src.conn, src.run_id) for r in chunk]
    summarize(rows, run_id=run.id, sla=run.sla, wall_ms=run.wall_ms, status=run.status,
              simulated=run.simulated)
    full_ms = (cpu_seconds() - c0) * 1000
    await src.close()
    replay = StoreSource(db, run.id, replay=True)
    await replay.open()
    c0 = cpu_seconds()
    await replay.snapshot()
    replay_first_ms = (cpu_seconds() - c0) * 1000
    c0 = cpu_seconds()
    for _ in range(40):
        await replay.snapshot()
    replay_tick_ms = (cpu_seconds() - c0) * 1000 / 40
    await replay.close()

    n = a.tasks
    early = [ms for done, ms, _new in ticks if done <= 0.2 * n]
    late = [ms for done, ms, _new in ticks if done >= 0.8 * n]
    med_e, med_l = statistics.median(early), statistics.median(late)
    # a tick's work is its new rows: CPU per task newly read, early vs late
    per_e = [ms * 1000 / new for done, ms, new in ticks if done <= 0.2 * n and new]
    per_l = [ms * 1000 / new for done, ms, new in ticks if done >= 0.8 * n and new]
    new_e = statistics.median([new for done, _ms, new in ticks if done <= 0.2 * n])
    new_l = statistics.median([new for done, _ms, new in ticks if done >= 0.8 * n])
    print(f"watch of a {n:,}-task run at {a.rate:.0f} calls/s: {len(ticks)} ticks after the "
          f"first (first tick {first_ms:.1f} ms CPU)")
    print(f"   tick CPU, first 20 % of the run: median {med_e:.2f} ms, max {max(early):.2f}")
    print(f"   tick CPU, last 20 % of the run:  median {med_l:.2f} ms, max {max(late):.2f}")
    print(f"   tasks newly read per tick: median {new_e:.0f} early, {new_l:.0f} late; CPU per "
          f"task read: {statistics.median(per_e):.0f} µs early, {statistics.median(per_l):.0f}"
          f" µs late")
    print(f"   late / early per tick: {med_l / med_e:.2f}x; per task read: "
          f"{statistics.median(per_l) / statistics.median(per_e):.2f}x (1.0 = independent of "
          f"run size)")
    print(f"   baseline, a full re-read of the run (old watch tick): {full_ms:.0f} ms CPU = "
          f"{full_ms / med_l:.0f}x a late tick")
    print(f"   finished replay: first read {replay_first_ms:.0f} ms, then {replay_tick_ms:.3f} "
          f"ms per tick")
    print(f"   (this machine, {time.strftime('%Y-%m-%d')}; CPU of this process, SQLite "
          f"thread included)")


if __name__ == "__main__":
    asyncio.run(main())
