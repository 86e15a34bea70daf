"""Store throughput and its cost to the engine, measured in the same run.

1. Engine on the simulator (separate process, fixed:200), 5,000 tasks at 140 in
   flight, with and without the store writer attached: wall ratio, the writer's
   deepest queue (rows waiting for a flush) and its longest flush.
2. Writer capacity: 20,000 finished tasks (each with one attempt and a ~4.8 KB
   answer, the team's shape) pushed through the writer as fast as the event loop
   allows: task records and rows committed per second.

    python bench/store.py [--tasks 5000] [--capacity 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import sim_process
from swarm_tui.core import events as ev
from swarm_tui.core.records import Attempt
from swarm_tui.core.states import SUCCEEDED
from swarm_tui.engine.routing import SingleGateway
from swarm_tui.engine.runner import RunPolicy, SwarmRunner
from swarm_tui.gateway.client import GatewayClient
from swarm_tui.gateway.keypool import KeyPool
from swarm_tui.prices import load_price_table
from swarm_tui.run.recorder import RunRecorder
from swarm_tui.settings.run_sections import RetryConfig
from swarm_tui.settings.sections import RoutingConfig
from swarm_tui.store.claims import take_lock
from swarm_tui.store.db import open_db
from swarm_tui.store.runs import create_run
from swarm_tui.store.writer import StoreWriter
from swarm_tui.workload import demo_tasks

KEY = "sk-bench-0123456789abcdefghijklmnop"


def make_runner(gw: GatewayClient | None, n: int, conc: int) -> SwarmRunner:
    gateways = {"sim": gw} if gw else {"sim": _Offline()}
    return SwarmRunner(demo_tasks(n), gateways, SingleGateway("sim"),  # type: ignore[arg-type]
                       RunPolicy(conc, RetryConfig(), RoutingConfig(), "deepseek-v3.2"),
                       load_price_table(None, {}, "bench"))


class _Offline:
    """Stands in for a gateway in the writer-capacity phase: nothing is sent."""

    pinned_model = None
    name = "sim"
    pool = KeyPool()


async def engine_phase(url: str, n: int, conc: int, db: Path, with_store: bool) -> dict:
    gw = GatewayClient("sim", url, [(KEY, None)], pool=conc, timeout_s=30)
    runner = make_runner(gw, n, conc)
    conn = writer = None
    if with_store:
        conn = await open_db(db)
        claim = take_lock(db, "engine")
        await create_run(conn, "engine", runner.records, demo_tasks(n), name=None,
                     simulated=True, config={}, claim=claim)
        writer = StoreWriter(conn, db, "engine", runner, claim=claim)
        RunRecorder(writer, runner)
        writer.start()
    t0 = time.perf_counter()
    await runner.run()
    wall = time.perf_counter() - t0
    out = {"wall_s": wall, "ok": runner.counts["succeeded"]}
    if writer is not None and conn is not None:
        t1 = time.perf_counter()
        await writer.close("finished")
        out.update(close_ms=(time.perf_counter() - t1) * 1000, max_pending=writer.stats.max_pending,
                   flush_ms_max=writer.stats.flush_ms_max, flushes=writer.stats.flushes)
        await conn.close()
    await gw.aclose()
    return out


async def capacity_phase(n: int, db: Path) -> dict:
    runner = make_runner(None, n, 140)
    runner.started_wall = time.time()
    conn = await open_db(db)
    t0 = time.perf_counter()
    claim = take_lock(db, "capacity")
    await create_run(conn, "capacity", runner.records, demo_tasks(n), name=None,
                     simulated=True, config={}, claim=claim)
    setup_s = time.perf_counter() - t0
    writer = StoreWriter(conn, db, "capacity", runner, claim=claim)
    recorder = RunRecorder(writer, runner)
    text = "the swarm agent answers with a short careful summary " * 90  # ~4.8 KB
    for a in runner.records:  # finished tasks, as the engine leaves them
        att = Attempt(1, a.model, "sim", "sk-…beef#abcdef", 5.0, 1.0, 180.0, 60.0, tokens_in=720,
                      tokens_out=1200, outcome="ok")
        a.attempts.append(att)
        a.state, a.latency_ms, a.ttft_ms = SUCCEEDED, 180.0, 60.0
        a.tokens_in, a.tokens_out = 720, 1200
        a.cost_usd, a.response_text, a.finished_ms, a.status_code = 0.0007, text, 200.0, 200
    writer.start()
    t0 = time.perf_counter()
    emit_s = 0.0
    for i, a in enumerate(runner.records):
        e0 = time.perf_counter()
        recorder.on_event(ev.Event(ev.SUCCEEDED, 200.0, a, a.attempts[0]))
        emit_s += time.perf_counter() - e0
        if i % 500 == 499:
            await asyncio.sleep(0)  # the engine yields to the loop between events
    await writer.close("finished")
    total_s = time.perf_counter() - t0
    await conn.close()
    return {"tasks": n, "total_s": total_s, "setup_s": setup_s, "emit_us": emit_s / n * 1e6,
            "rows": writer.stats.rows, "max_pending": writer.stats.max_pending,
            "flush_ms_max": writer.stats.flush_ms_max}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=140)
    ap.add_argument("--capacity", type=int, default=20000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        with sim_process("--profile", "fixed:200") as url:
            base = asyncio.run(engine_phase(url, a.tasks, a.concurrency, Path(tmp) / "a.db", False))
            store = asyncio.run(engine_phase(url, a.tasks, a.concurrency, Path(tmp) / "b.db", True))
        cap = asyncio.run(capacity_phase(a.capacity, Path(tmp) / "c.db"))
    print(f"1. engine on the simulator: {a.tasks} tasks, {a.concurrency} in flight, fixed:200")
    print(f"   without store  wall {base['wall_s']:.2f} s")
    ratio = store["wall_s"] / base["wall_s"]
    print(f"   with store     wall {store['wall_s']:.2f} s  ratio {ratio:.3f}  deepest queue "
          f"{store['max_pending']} rows  longest flush {store['flush_ms_max']:.1f} ms  "
          f"flushes {store['flushes']}  final flush {store['close_ms']:.0f} ms")
    rate = cap["tasks"] / cap["total_s"]
    print(f"2. writer capacity: {cap['tasks']} finished tasks (+1 attempt each, ~4.8 KB answers)")
    print(f"   {rate:,.0f} task records/s  ({cap['rows'] / cap['total_s']:,.0f} rows/s incl. "
          f"attempts)  target >= 20,000 task records/s")
    print(f"   engine-side cost {cap['emit_us']:.1f} us per event; deepest queue "
          f"{cap['max_pending']} rows; longest flush {cap['flush_ms_max']:.0f} ms; "
          f"run setup (insert {cap['tasks']} queued tasks) {cap['setup_s']:.2f} s")


if __name__ == "__main__":
    main()
