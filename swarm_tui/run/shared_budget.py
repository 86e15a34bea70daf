"""A worker's part of its run's budget cap: drawn from the store a window at a time.

The runner may commit (spent + calls in flight + the next call) up to its allowance; this
keeps about one window of calls in flight (its concurrency × the dearest call estimate
seen) drawn ahead, and when the call waiting for allowance cannot be funded from what the
run's cap has left and this worker has nothing in flight, it stops dispatch at the cap, as
a single process does (store/budget_ledger.py holds the arithmetic).
"""

from __future__ import annotations

from collections.abc import Callable

from swarm_tui.engine.runner import BUDGET_WARN_AT, SwarmRunner
from swarm_tui.settings.run_sections import AlertKind
from swarm_tui.store.budget_ledger import draw_budget
from swarm_tui.store.conn import StoreConnection


class SharedBudget:
    def __init__(self, runner: SwarmRunner, run_id: str, worker: str, cap: float,
                 dead_after_s: float, page: Callable[..., None]) -> None:
        """`page(kind, summary, **details)`: a run-level alert this worker sends (the draw
        that crossed 80 % of the cap is one: draws are serialised, so exactly one does)."""
        self.runner, self.run_id, self.worker = runner, run_id, worker
        self.cap, self.dead_after_s, self.page = cap, dead_after_s, page
        self.per_call = 0.0  # the dearest estimate a call waited with
        runner.allowance = 0.0  # nothing may be sent before the first draw

    async def tend(self, conn: StoreConnection) -> None:
        runner = self.runner
        short = runner.budget_short
        self.per_call = max(self.per_call, short)
        window = self.per_call * runner.limit
        headroom = runner.allowance or 0.0
        headroom -= runner.spent_usd + runner.in_flight_est_usd
        if not short and headroom >= window / 2:
            return
        # at least one call's worth, or nothing: no dust drawn near the cap
        draw = await draw_budget(conn, self.run_id, self.worker, self.cap,
                                 need=short or self.per_call,
                                 want=max(window - headroom, short),
                                 dead_after_s=self.dead_after_s)
        runner.others_usd = draw.committed - draw.mine
        warn_at = BUDGET_WARN_AT * self.cap
        if draw.granted and draw.committed - draw.granted < warn_at <= draw.committed:
            self.page(AlertKind.BUDGET_80, f"budget 80% committed: ${draw.committed:.4f} of "
                      f"${self.cap:.4f} drawn by the run's {draw.workers} workers",
                      committed_usd=draw.committed, cap_usd=self.cap)
        if draw.granted:
            runner.allow(draw.granted)
        elif short and not runner.in_flight and not runner.stop_reason:
            runner.stop_at_budget(self.cap, short, f"${draw.committed:.4f} committed by the "
                                  f"run's {draw.workers} workers")
