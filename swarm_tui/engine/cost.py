"""Cost of a run from its recorded tokens: totals, breakdowns, rate, projections, what-ifs.

Only succeeded tasks are billed here (a task's tokens are those of its successful
attempt, as everywhere in swarm-tui). A task on an unpriced model adds to
`unpriced_tasks`, never $0. Re-pricing recorded tokens on another model assumes
the same token counts — the team's own per-model simulation made that assumption.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from swarm_tui.core.record import field, record
from swarm_tui.core.states import TaskState
from swarm_tui.core.usage import Usage
from swarm_tui.prices import Price, PriceTable

DAYS_PER_MONTH = 30


class CostRow(Protocol):
    """One task (an engine TaskRecord, a stored task row), or a group of a stored run's
    succeeded tasks summed by the database (`tasks` of them: store/cost_rows.py)."""

    @property
    def tasks(self) -> int: ...
    state: str
    model: str
    gateway: str
    bucket: str
    key_fp: str | None
    tokens_in: int
    tokens_out: int
    cached_in: int
    usage_estimated: bool
    cost_usd: float | None


@record(kw_only=True)
class CostLine:
    """A group of succeeded tasks' tokens and cost."""

    tasks: int = 0                  # succeeded tasks
    tokens_in: int = 0
    tokens_out: int = 0
    cached_in: int = 0
    cost_usd: float = 0.0           # priced tasks only
    cost_per_task_usd: float | None = None
    unpriced_tasks: int = 0
    estimated_tasks: int = 0        # usage not reported by the gateway: estimated tokens


@record(kw_only=True)
class Projection:
    """The run's spend rate and what it comes to per day and month."""

    usd_per_min: float | None = None        # this run's spend rate over its wall time
    day_at_rate_usd: float | None = None    # that rate for 24 h
    month_at_rate_usd: float | None = None
    tasks_per_day: int
    day_at_volume_usd: float | None = None  # cost per task × tasks per day
    month_at_volume_usd: float | None = None
    # tasks on models with no price: every figure above is over priced tasks only, and
    # null (never $0) when none was priced
    unpriced_tasks: int = 0


@record(kw_only=True)
class WhatIf:
    """The run's recorded tokens priced on another model."""

    model: str
    cost_usd: float
    cost_per_task_usd: float | None
    month_usd: float | None                 # at the configured tasks per day
    vs_actual: float | None                 # ratio to what this run cost
    price: Price
    actual: bool = False                    # every priced task ran on this model


@record(kw_only=True)
class RoutingWhatIf:
    """What the dual-model routing saved against everything on the long model."""

    long_model: str
    actual_usd: float
    all_long_usd: float | None              # None: the long model is unpriced
    saving_pct: float | None                # how much the dual-model routing saved


@record(kw_only=True)
class CostReport:
    """A run's cost: totals, breakdowns, projections, what-ifs, timeline."""

    run_id: str
    wall_s: float
    estimated: bool
    total: CostLine
    projection: Projection
    by_model: dict[str, CostLine] = field(default_factory=dict)
    by_gateway: dict[str, CostLine] = field(default_factory=dict)
    by_bucket: dict[str, CostLine] = field(default_factory=dict)
    by_key: dict[str, CostLine] = field(default_factory=dict)
    what_if: list[WhatIf] = field(default_factory=list)
    routing: RoutingWhatIf | None = None
    budget_usd: float | None = None         # the run's cap, if it has one
    timeline: list[float] = field(default_factory=list)  # cumulative USD at equal steps


def _line(rows: Iterable[CostRow]) -> CostLine:
    u = Usage()
    for r in rows:
        if r.state == TaskState.SUCCEEDED:
            u.add(r.tokens_in, r.tokens_out, r.cost_usd, cached_in=r.cached_in,
                  estimated=r.usage_estimated, tasks=r.tasks)
    return CostLine(tasks=u.tasks, tokens_in=u.tokens_in, tokens_out=u.tokens_out,
                    cached_in=u.cached_in, cost_usd=u.cost_usd,
                    cost_per_task_usd=u.cost_per_task_usd, unpriced_tasks=u.unpriced_tasks,
                    estimated_tasks=u.estimated_tasks)


def _group(rows: Sequence[CostRow], attr: str) -> dict[str, CostLine]:
    groups: dict[str, list[CostRow]] = {}
    for r in rows:
        if r.state == TaskState.SUCCEEDED:
            groups.setdefault(getattr(r, attr) or "-", []).append(r)
    return {k: _line(groups[k]) for k in sorted(groups)}


def cost_report(rows: Sequence[CostRow], prices: PriceTable, *, run_id: str, wall_s: float,
                tasks_per_day: int, long_model: str | None = None,
                finished_s: Sequence[float | None] | None = None,
                budget_usd: float | None = None, steps: int = 30) -> CostReport:
    """`finished_s`: each row's end, seconds since the run started (for the timeline)."""
    total = _line(rows)
    priced = total.tasks - total.unpriced_tasks
    # an all-unpriced run has no rate: null, not $0.00/min
    per_min = total.cost_usd / (wall_s / 60.0) if wall_s > 0 and priced else None
    per_task = total.cost_per_task_usd
    proj = Projection(
        usd_per_min=per_min,
        day_at_rate_usd=per_min * 1440 if per_min is not None else None,
        month_at_rate_usd=per_min * 1440 * DAYS_PER_MONTH if per_min is not None else None,
        tasks_per_day=tasks_per_day,
        day_at_volume_usd=per_task * tasks_per_day if per_task is not None else None,
        month_at_volume_usd=(per_task * tasks_per_day * DAYS_PER_MONTH
                             if per_task is not None else None),
        unpriced_tasks=total.unpriced_tasks,
    )
    done = [r for r in rows if r.state == TaskState.SUCCEEDED]
    report = CostReport(
        run_id=run_id, wall_s=wall_s, estimated=bool(total.estimated_tasks), total=total,
        projection=proj, by_model=_group(rows, "model"), by_gateway=_group(rows, "gateway"),
        by_bucket=_group(rows, "bucket"), by_key=_group(rows, "key_fp"),
        what_if=what_if(done, prices, total, tasks_per_day), budget_usd=budget_usd,
    )
    if long_model is not None and done:
        actual = total.cost_usd
        all_long = _repriced(done, prices.get(long_model))
        report.routing = RoutingWhatIf(
            long_model=long_model, actual_usd=actual, all_long_usd=all_long,
            saving_pct=(1 - actual / all_long) * 100 if all_long and not total.unpriced_tasks
            else None)
    if finished_s is not None and wall_s > 0:
        report.timeline = _timeline(rows, finished_s, wall_s, steps)
    return report


def _repriced(rows: Sequence[CostRow], price: Price | None) -> float | None:
    if price is None:
        return None
    return sum(price.cost(r.tokens_in, r.tokens_out, r.cached_in) for r in rows)


def what_if(done: Sequence[CostRow], prices: PriceTable, total: CostLine,
            tasks_per_day: int) -> list[WhatIf]:
    """The same recorded tokens on every model in the table, cheapest first."""
    if not done:
        return []
    models = {r.model for r in done}
    out = []
    for name, price in prices.prices.items():
        usd = _repriced(done, price) or 0.0
        per_task = usd / sum(r.tasks for r in done)
        out.append(WhatIf(
            model=name, cost_usd=usd, cost_per_task_usd=per_task,
            month_usd=per_task * tasks_per_day * DAYS_PER_MONTH,
            vs_actual=usd / total.cost_usd if total.cost_usd and not total.unpriced_tasks
            else None,
            price=price, actual=models == {name}))
    return sorted(out, key=lambda w: w.cost_usd)


def _timeline(rows: Sequence[CostRow], finished_s: Sequence[float | None], wall_s: float,
              steps: int) -> list[float]:
    spent = [0.0] * steps
    for r, t in zip(rows, finished_s, strict=False):
        if r.state == TaskState.SUCCEEDED and r.cost_usd is not None and t is not None:
            spent[min(steps - 1, max(0, int(t / wall_s * steps)))] += r.cost_usd
    running, out = 0.0, []
    for v in spent:
        running += v
        out.append(running)
    return out
