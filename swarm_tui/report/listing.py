"""`runs` and the console's history list: one line per stored run.

Read without pydantic or the engine (issue 34: `runs` starts in ≤ 5× `python -c pass`): an
ended run's figures come straight from its stored summary (defaults as `RunSummary` has
them); only a live or interrupted run's summary is computed from its rows."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from swarm_tui.core.plain import as_plain
from swarm_tui.core.record import fields, record
from swarm_tui.store.runs import ENDED, list_runs

if TYPE_CHECKING:
    from swarm_tui.store.conn import StoreConnection


@record(slots=True, frozen=True)
class RunListItem:
    """One stored run as `runs` lists it."""

    id: str
    name: str | None
    started_at: float
    status: str
    simulated: bool
    total: int
    done: int
    success_rate: float | None
    call_success_rate: float | None
    p95_ms: float | None
    cost_usd: float
    unpriced_tasks: int

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


async def runs_listing(conn: StoreConnection, limit: int) -> list[RunListItem]:
    items = []
    for run in await list_runs(conn, limit):
        status = run.effective_status()
        if run.summary is not None and status in ENDED:
            s: dict[str, Any] = run.summary
        else:
            from swarm_tui.report.history import load_summary

            s = as_plain(await load_summary(conn, run))
        items.append(RunListItem(
            id=run.id, name=run.name, started_at=run.started_at, status=status,
            simulated=run.simulated, total=run.total,
            done=s.get("succeeded", 0) + s.get("failed", 0),
            success_rate=s.get("success_rate"), call_success_rate=s.get("call_success_rate"),
            p95_ms=(s.get("latency_ms") or {}).get("p95"), cost_usd=s.get("cost_usd", 0.0),
            unpriced_tasks=s.get("unpriced_tasks", 0)))
    return items


def runs_table(items: list[RunListItem]) -> str:
    if not items:
        return "no runs recorded yet"
    head = (f"{'RUN':<21} {'NAME':<14} {'STARTED':<16} {'STATUS':<12} {'TASKS':>11} "
            f"{'OK %':>6} {'CALL%':>6} {'P95 MS':>7} {'COST':>10}")
    lines = [head]
    for r in items:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at))
        rate = "-" if r.success_rate is None else f"{r.success_rate * 100:.1f}"
        call = "-" if r.call_success_rate is None else f"{r.call_success_rate * 100:.1f}"
        p95 = "-" if r.p95_ms is None else f"{r.p95_ms:.0f}"
        cost = f"${r.cost_usd:.4f}" + ("+?" if r.unpriced_tasks else "")
        name = (r.name or ("(sim)" if r.simulated else ""))[:14]
        lines.append(f"{r.id:<21} {name:<14} {started:<16} {r.status:<12} "
                     f"{f'{r.done}/{r.total}':>11} {rate:>6} {call:>6} {p95:>7} {cost:>10}")
    return "\n".join(lines)
