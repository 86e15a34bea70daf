"""`swarm-tui cost RUN_ID [--json]`, and the cost section of `report`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarm_tui.core.fmt import usd
from swarm_tui.core.plain import as_plain
from swarm_tui.core.states import RunStatus
from swarm_tui.engine.cost import CostLine, CostReport, cost_report
from swarm_tui.store import cost_index
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.cost_rows import CostGroup, cost_groups
from swarm_tui.store.runs import RunRecord, wall_ms_so_far

TIMELINE_STEPS = 30  # the cost timeline's equal parts of the run

if TYPE_CHECKING:
    from swarm_tui.settings.view import ConfigView


def long_model_of(run: RunRecord, cfg: ConfigView) -> str | None:
    routing = run.config.get("settings", {}).get("routing") or as_plain(cfg.settings.routing)
    return routing.get("long_model") if routing.get("enabled", True) else None


async def run_cost_groups(conn: StoreConnection, run: RunRecord, wall_ms: float
                          ) -> list[CostGroup]:
    """The run's succeeded tasks summed (store/cost_rows.py): once it has ended, as stored
    then (store/cost_index.py), else — or when that was summed before a resume — from its
    rows, kept for the next reader when it has ended."""
    ended_at = run.finished_at if run.status != RunStatus.RUNNING else None
    if ended_at is not None:
        kept = await cost_index.read(conn, run.id, ended_at, wall_ms, TIMELINE_STEPS)
        if kept is not None:
            return kept
    rows = await cost_groups(conn, run.id, run.started_at, wall_ms / 1000.0, TIMELINE_STEPS)
    if ended_at is not None:
        await cost_index.write(conn, run.id, ended_at, wall_ms, TIMELINE_STEPS, rows)
    return rows


async def stored_cost(conn: StoreConnection, run: RunRecord, cfg: ConfigView
                      ) -> CostReport:
    """Recorded costs as billed at run time; what-ifs priced on the current table."""
    wall_ms = await wall_ms_so_far(conn, run)
    wall_s = wall_ms / 1000.0
    rows = await run_cost_groups(conn, run, wall_ms)
    tpd = int(run.config.get("settings", {}).get("tasks_per_day")
              or cfg.settings.tasks_per_day)
    return cost_report(rows, cfg.prices, run_id=run.id, wall_s=wall_s,
                       tasks_per_day=tpd, long_model=long_model_of(run, cfg),
                       finished_s=[r.finished_s for r in rows], steps=TIMELINE_STEPS,
                       budget_usd=run.config.get("budget_usd"))


def _line_row(name: str, c: CostLine) -> str:
    all_unpriced = c.unpriced_tasks and c.unpriced_tasks == c.tasks
    cost = ("unpriced" if all_unpriced else
            usd(c.cost_usd) + ("+unpriced" if c.unpriced_tasks else "")) + \
        ("~" if c.estimated_tasks else "")
    tokens = f"{c.tokens_in:,}/{c.tokens_out:,} ({c.cached_in:,})"
    return f"  {name[:22]:<22} {c.tasks:>7,} {tokens:>28} {cost:>16} " \
           f"{usd(c.cost_per_task_usd, 6):>11}"


def cost_text(r: CostReport) -> str:
    t, p = r.total, r.projection
    lines = [f"cost of run {r.run_id}" + ("  (~ ESTIMATED usage for "
                                          f"{t.estimated_tasks} tasks)" if r.estimated else "")]
    unpriced = f" + {t.unpriced_tasks} tasks on unpriced models (not $0: unknown)" \
        if t.unpriced_tasks else ""
    lines.append(f"total {usd(t.cost_usd)} for {t.tasks:,} tasks = "
                 f"{usd(t.cost_per_task_usd, 6)}/task{unpriced}")
    if p.usd_per_min is None and t.unpriced_tasks:
        lines.append(f"rate  unpriced: {t.unpriced_tasks} tasks on models with no price "
                     "(no projection; add [prices] to the config)")
    lines.append(f"rate  {usd(p.usd_per_min)}/min → {usd(p.day_at_rate_usd, 2)}/day, "
                 f"{usd(p.month_at_rate_usd, 2)}/month if it ran around the clock")
    lines.append(f"at {p.tasks_per_day:,} tasks/day: {usd(p.day_at_volume_usd, 2)}/day, "
                 f"{usd(p.month_at_volume_usd, 2)}/month (30 days)")
    head = f"  {'':<22} {'tasks':>7} {'tokens in/out (cached in)':>28} {'cost':>16} " \
           f"{'$/task':>11}"
    for title, group in (("model", r.by_model), ("gateway", r.by_gateway),
                         ("canary bucket", r.by_bucket), ("key", r.by_key)):
        if group:
            lines += ["", f"by {title}", head]
            lines += [_line_row(name, c) for name, c in group.items()]
    if r.what_if:
        lines += ["", f"what-if: this run's recorded tokens priced on each model "
                      f"(USD per MTok; month at {p.tasks_per_day:,} tasks/day × 30)",
                  *what_if_lines(r)]
    if r.routing is not None:
        lines += ["", routing_line(r)]
    return "\n".join(lines)


def what_if_lines(r: CostReport) -> list[str]:
    lines = [f"  {'model':<18} {'in':>6} {'cached':>7} {'out':>6} {'this run':>10} "
             f"{'$/task':>10} {'month':>9} {'vs run':>7}"]
    for w in r.what_if:
        cached = "-" if w.price.cached_input is None else f"{w.price.cached_input:g}"
        vs = "-" if w.vs_actual is None else f"{w.vs_actual:.2f}×"
        mark = " ◀ ran" if w.actual else ""
        lines.append(f"  {w.model[:18]:<18} {w.price.input:>6g} {cached:>7} "
                     f"{w.price.output:>6g} {usd(w.cost_usd):>10} "
                     f"{usd(w.cost_per_task_usd, 6):>10} {usd(w.month_usd, 0):>9} "
                     f"{vs:>7}{mark}")
    return lines


def routing_line(r: CostReport) -> str:
    g = r.routing
    if g is None:
        return ""
    saving = "" if g.saving_pct is None else f" → the routing saves {g.saving_pct:.0f}%"
    return (f"routing what-if: as routed {usd(g.actual_usd)} vs everything on "
            f"{g.long_model} {usd(g.all_long_usd)}{saving}")
