"""Seeking a stored run to a moment (issue 35): `replay --at` on a 100,000-task run.

Makes the run (the real `swarm-tui run --demo N --headless`, its simulator in its own
process) unless --db names one, then in a fresh process per moment builds the console's
snapshot at 10 moments spread over the run and prints how long each seek took and the
process's peak RSS. The run's end stores its timeline (store/replay_index.py; with --db,
the first seek stores it when the run has none); the baseline, measured in the same run,
is the same replay built from the rows (the stored timeline dropped first), and what
storing it costs the process that ends the run.

    python bench/replay.py [--tasks 100000] [--db FILE | --db postgresql://…]

(A PostgreSQL store: copy a run there first, `swarm-tui db copy RUN.db postgresql://…`.)
"""

from __future__ import annotations

import argparse
import json
import math
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


def seek(db: str, run_id: str, at: float | None, steps: int = 0) -> None:
    """One process: open the replay at `at` (cold), then `steps` moves from there as the
    console's keys make them (±1 s, ±10 s, a jump anywhere), each to its snapshot."""
    import asyncio
    import random

    from swarm_tui.run_sources import StoreSource
    from swarm_tui.runtime import tune_gc
    from swarm_tui.store.db import resolve_db_target

    tune_gc()  # as the console does
    if db.startswith("postgres"):  # the driver imported before the timer, as aiosqlite is
        import swarm_tui.store.pg  # noqa: F401

    async def go() -> tuple[float, list[float]]:
        t0 = time.perf_counter()
        s = StoreSource(resolve_db_target(db), run_id, replay=True, at=at)
        await s.open()
        moved = []
        try:
            snap = await s.snapshot()
            cold = time.perf_counter() - t0
            rng = random.Random(7)
            start, end = s.span() or (0.0, 0.0)
            now = at if at is not None else end
            for i in range(steps):
                step = (1.0, -1.0, 10.0, -10.0)[i % 4] if i % 5 else None
                now = rng.uniform(start, end) if step is None else now + step
                t1 = time.perf_counter()
                now = s.seek(now)
                snap = await s.snapshot()
                moved.append(time.perf_counter() - t1)
        finally:
            await s.close()
        assert snap is not None
        return cold, moved

    took, moved = asyncio.run(go())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"s": took, "rss_mb": rss, "steps": moved}))


def keep(db: str, run_id: str) -> None:
    """What the run's end spends storing its timeline (run/stored_run.keep_replay)."""
    import asyncio

    from swarm_tui.replay.timeline import keep_timeline
    from swarm_tui.store.db import open_db, resolve_db_target

    async def go() -> float:
        conn = await open_db(resolve_db_target(db), create=False)
        try:
            async with conn.execute("SELECT started_at, finished_at FROM runs WHERE id=?",
                                    (run_id,)) as cur:
                start, end = await cur.fetchone()
            t0 = time.perf_counter()
            assert await keep_timeline(conn, run_id, start, end)
            return time.perf_counter() - t0
        finally:
            await conn.close()

    took = asyncio.run(go())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"s": took, "rss_mb": rss}))


def sql(db: str, query: str) -> tuple | None:
    """One statement on the bench's store (SQLite file or PostgreSQL URL), its first row."""
    if db.startswith("postgres"):
        import psycopg

        with psycopg.connect(db, autocommit=True) as pg:
            cur = pg.execute(query)
            return cur.fetchone() if cur.description else None
    c = sqlite3.connect(db)
    try:
        row = c.execute(query).fetchone()
        c.commit()
        return row
    finally:
        c.close()


def drop_index(db: str) -> None:
    sql(db, "DELETE FROM replay_index")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--db")
    ap.add_argument("--child", nargs=3)
    ap.add_argument("--steps", type=int, default=0)
    a = ap.parse_args()
    if a.child:
        db, run_id, at = a.child
        if at == "keep":
            return keep(db, run_id)
        return seek(db, run_id, math.inf if at == "end" else float(at), steps=a.steps)
    with tempfile.TemporaryDirectory() as tmp:
        db = a.db or os.path.join(tmp, "runs.db")
        if not a.db:
            subprocess.run([sys.executable, "-m", "swarm_tui", "run", "--demo", str(a.tasks),
                            "--headless", "--quiet", "--concurrency", "400", "--sim-profile",
                            "fixed:100", "--rate", "0", "--sim-rate-503", "0.01"],
                           env={**os.environ, "SWARM_TUI_DB": db}, check=False,
                           capture_output=True, stdin=subprocess.DEVNULL)
        run_id, start, end, total = sql(db, "SELECT id, started_at, finished_at, total FROM "
                                            "runs ORDER BY started_at DESC LIMIT 1") or ()

        def child(at: str, steps: int = 0) -> dict:
            out = subprocess.run([sys.executable, __file__, "--child", db, run_id, at,
                                  "--steps", str(steps)],
                                 capture_output=True, text=True, check=True).stdout
            return json.loads(out.strip().splitlines()[-1])

        kept = child("keep")  # the run's end, again: built from the rows and stored
        moments = [start + (end - start) * i / 10 for i in range(1, 11)]
        seeks = [child(repr(t)) for t in moments]
        # in one console: 200 moves (±1 s, ±10 s, every fifth a jump anywhere)
        walk = child(repr(start + (end - start) / 2), steps=200)
        drop_index(db)
        base = child("end")  # no stored timeline: built from the rows (and stored again)
    times = [s["s"] for s in seeks]
    print(f"run of {total:,} tasks, {end - start:.0f} s; replay at the end built from the rows "
          f"(baseline): {base['s'] * 1000:.0f} ms, peak RSS {base['rss_mb']:.0f} MB; storing "
          f"the timeline at the run's end: {kept['s'] * 1000:.0f} ms "
          f"(peak RSS {kept['rss_mb']:.0f} MB)")
    print("seek to 10 moments: " + ", ".join(f"{t * 1000:.0f}" for t in times) + " ms")
    print(f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
          f"({max(times) / base['s']:.2f}x the end); peak RSS max "
          f"{max(s['rss_mb'] for s in seeks):.0f} MB (targets: ≤ 300 ms, ≤ 300 MB)")
    moves = sorted(walk["steps"])
    p99 = moves[int(len(moves) * 0.99) - 1]
    print(f"200 moves in one replay: p50 {statistics.median(moves) * 1000:.0f} ms, "
          f"p99 {p99 * 1000:.0f} ms, max {moves[-1] * 1000:.0f} ms "
          f"({p99 / base['s']:.3f}x the end's cold read); peak RSS "
          f"{walk['rss_mb']:.0f} MB (targets: step p99 ≤ 100 ms, ≤ 300 MB)")


if __name__ == "__main__":
    main()
