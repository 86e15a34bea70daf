"""`swarm-tui watch --metrics-port P`: a watcher re-exports the run it follows as
Prometheus metrics, counted from the stored rows (each once) as the executor counts them
from its engine events — for a Prometheus that reaches a bastion, not the executor's host.

With `--headless` there is no console: the watcher follows the run to its end, serving
`/metrics`, and lingers (like `run --metrics-linger`) until the final figures are scraped.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from swarm_tui.ops.metrics import MetricsServer, RunMetrics
from swarm_tui.run_sources import StoreSource
from swarm_tui.store.target import DbTarget

FOLLOW_S = 1.0  # a headless watcher reads new rows once a second (a scrape interval's worth)


def metrics_for(db: DbTarget, run_id: str, simulated: bool, port: int, bind: str
                ) -> tuple[RunMetrics, MetricsServer]:
    metrics = RunMetrics(run_id, simulated)
    server = MetricsServer(metrics, port, bind)  # a busy port: one line, before anything
    where = db.name if isinstance(db, Path) else str(db)
    print(f"swarm-tui: metrics of run {run_id} ({where}) at "
          f"http://{bind}:{server.port}/metrics", file=sys.stderr)
    return metrics, server


async def follow_headless(source: StoreSource, metrics: RunMetrics, server: MetricsServer,
                          linger_s: float) -> None:
    """Follow the run until it has ended and its last rows are read; then linger."""
    await source.open()
    try:
        while True:
            snap = await source.snapshot()
            if snap is not None and not source.active:
                break
            await asyncio.sleep(FOLLOW_S)
    finally:
        await source.close()
    if linger_s > 0:
        await server.linger(metrics, linger_s)
