"""The cost panel: totals, budget, projections, per-model bars, cost over time, what-if.

Read from the source once a second (a live run prices its agents; a watched or
replayed one reads the store). Nothing here changes anything.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from swarm_tui.engine.cost import CostReport
from swarm_tui.report.cost import routing_line, usd, what_if_lines
from swarm_tui.run_sources.base import RunSource
from swarm_tui.ui.widgets import SPARK

BAR = 24


def bar(value: float, peak: float, width: int = BAR) -> str:
    fill = round(width * value / peak) if peak > 0 else 0
    return "█" * fill + "░" * (width - fill)


def spark(values: list[float]) -> str:
    if not values or values[-1] <= 0:
        return ""
    top = values[-1]
    return "".join(SPARK[min(len(SPARK) - 1, round(v / top * (len(SPARK) - 1)))]
                   for v in values)


def panel_text(r: CostReport) -> Text:
    t, p = r.total, r.projection
    out = Text()
    est = f"  ~ESTIMATED usage for {t.estimated_tasks} tasks" if r.estimated else ""
    out.append(f"cost {usd(t.cost_usd)}", style="bold")
    out.append(f" for {t.tasks:,} tasks ({usd(t.cost_per_task_usd, 6)}/task)   rate "
               f"{usd(p.usd_per_min)}/min{est}\n")
    if t.unpriced_tasks:
        out.append(f"+ {t.unpriced_tasks} tasks on unpriced models: not counted, not $0\n",
                   style="bold")
    if r.budget_usd:
        share = t.cost_usd / r.budget_usd
        out.append(f"budget {bar(min(share, 1.0), 1.0)} {usd(t.cost_usd)} of "
                   f"{usd(r.budget_usd, 2)} ({share:.0%})\n")
    out.append(f"at {p.tasks_per_day:,} tasks/day: {usd(p.day_at_volume_usd, 2)}/day · "
               f"{usd(p.month_at_volume_usd, 2)}/month   (at this run's rate: "
               f"{usd(p.month_at_rate_usd, 2)}/month)\n")
    if r.by_model:
        out.append("\nby model\n", style="bold")
        peak = max(c.cost_usd for c in r.by_model.values())
        for name, c in r.by_model.items():
            cost = "unpriced" if c.cost_per_task_usd is None and c.unpriced_tasks else \
                usd(c.cost_usd)
            out.append(f"  {name[:16]:<16} {bar(c.cost_usd, peak)} {cost:>9} "
                       f"{c.tasks:>6,} tasks {usd(c.cost_per_task_usd, 6)}/task\n")
    line = spark(r.timeline)
    if line:
        out.append("\ncost over time ", style="bold")
        out.append(f"{line}  (cumulative over {r.wall_s:,.1f} s)\n")
    if r.what_if:
        out.append("\nwhat-if: the same recorded tokens on each model\n", style="bold")
        out.append("\n".join(what_if_lines(r)) + "\n")
    if r.routing is not None:
        out.append("\n" + routing_line(r) + "\n")
    return out


class CostScreen(Screen[None]):
    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back", id="cost.back")]

    def __init__(self, source: RunSource, refresh_s: float = 1.0) -> None:
        super().__init__()
        self.source = source
        self.refresh_s = refresh_s
        self.report: CostReport | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="cost"):
            yield Static("pricing…", id="cost-text")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(self.refresh_s, self.reload)
        self.call_later(self.reload)

    async def reload(self) -> None:
        self.report = await self.source.cost()
        text = Text("no tasks yet") if self.report is None else panel_text(self.report)
        self.query_one("#cost-text", Static).update(text)
