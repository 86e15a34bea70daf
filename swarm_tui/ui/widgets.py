"""Status bar, latency histogram and event log: cheap widgets fed from snapshots."""

from __future__ import annotations

from collections import deque
from typing import Any

from textual.content import Content
from textual.events import Resize
from textual.markup import escape
from textual.widgets import RichLog, Static

from swarm_tui.core import fmt
from swarm_tui.core.fmt import shown
from swarm_tui.core.states import KeyState, RunStatus, TaskState
from swarm_tui.engine.snapshot import HIST_EDGES_MS, Snapshot
from swarm_tui.ui.log_fit import fit_line

Part = tuple[int, str] | tuple[int, str, str]  # (priority, markup[, shorter markup])


def fit_parts(parts: list[Part], width: int, sep: str = " │ ") -> str:
    """Join parts, fitting `width` cells: first the least important parts (highest number,
    rightmost first) take their shorter form, then they are dropped; priority 0 is never
    dropped. At 80 columns state, done/total, success, p95 and cost stay, the canary stage
    and key count stay short, and the run id and rates go."""
    kept: list[list] = [[p[0], p[1], p[2] if len(p) > 2 else None] for p in parts if p[1]]

    def too_long() -> bool:
        return Content.from_markup(sep.join(p[1] for p in kept)).cell_length > width

    # least important first: a part with a shorter form takes it, one without is dropped;
    # a second pass drops the shortened ones too if that was not enough
    order = sorted(range(len(kept)), key=lambda i: (-kept[i][0], -i))
    for final in (False, True):
        for i in order:
            if not too_long():
                break
            if kept[i][2] and not final:
                kept[i][1], kept[i][2] = kept[i][2], None
            elif kept[i][0] > 0 and (final or kept[i][2] is None):
                kept[i][1] = ""
    return sep.join(p[1] for p in kept if p[1])


class StatusBar(Static):
    """Two lines: who/what/state, then the SLA figures (coloured and marked with ! on breach).
    Parts degrade by priority to the bar's width; every name that came from a user, a
    gateway or a run id is escaped, never markup."""

    def show(self, s: Snapshot | None, message: str = "", frozen: bool = False) -> None:
        if s is None:
            self.update(Content.from_markup(f"[b]swarm-tui[/]  {escape(shown(message))}"))
            return
        width = max(20, self.size.width - 2 if self.size.width else 78)
        badge = "[reverse $warning] SIMULATED [/]" if s.simulated else "[reverse $error] LIVE [/]"
        if s.source != "live":
            badge += f" [reverse $accent] {s.source.upper()} [/]"
        if s.readonly:
            badge += " [dim]read-only[/]"
        if frozen:
            badge += " [reverse $accent] FROZEN [/]"
        state = s.status.upper()
        if s.waiting_for_keys and s.status == RunStatus.RUNNING:
            state = f"[reverse $warning]WAITING: {escape(s.waiting_for_keys)}[/]"
        keys = ""
        if s.keys:
            ok = sum(k.state == KeyState.ACTIVE for k in s.keys)
            colour = "$success" if ok == len(s.keys) else ("$warning" if ok else "$error")
            keys = f"[{colour}]keys {ok}/{len(s.keys)}[/]"
        c = s.counts
        ended = c.get(TaskState.SUCCEEDED, 0) + c.get(TaskState.FAILED, 0)
        pct = f"{ended}/{s.total}"  # cancelled tasks are not done: they stay resumable
        pct_short = pct
        if c.get(TaskState.CANCELLED):
            pct += f" [dim]−{c[TaskState.CANCELLED]} cancelled[/]"
            pct_short += f" [dim]−{c[TaskState.CANCELLED]}[/]"
        # the SLA's rate (per call by default, as the team measures) in colour; the other
        # one beside it, dimmed, while there is room
        by_call = s.sla.success_basis == "call" and s.call_success_rate is not None
        judged = s.call_success_rate if by_call else s.success_rate
        other = s.success_rate if by_call else s.call_success_rate
        ok_rate = judged is None or judged >= s.sla.min_success
        p95 = s.latency_ms[1]
        ok_p95 = p95 is None or p95 <= s.sla.p95_ms
        good, bad = "$success", "$error"
        p95_txt = f"[{good if ok_p95 else bad}]p95 {fmt.ms(p95)}{'' if ok_p95 else '!'}[/]"
        if s.client_bound:  # the latency is partly this process's: no verdict drawn from it
            p95_txt = f"[$warning]p95 {fmt.ms(p95)}?[/]"
        rate_txt = (f"[{good if ok_rate else bad}]ok {fmt.pct(judged)}{'' if ok_rate else '!'}"
                    f"{'/call' if by_call else '/task'}[/]")
        other_txt = f"[dim]{fmt.pct(other)}/{'task' if by_call else 'call'}[/]" \
            if other is not None else ""
        cost = f"${s.cost_usd:,.4f}" + ("+?" if s.unpriced_tasks else "") + \
            ("~" if s.usage_estimated else "")
        if s.budget_usd:
            share = s.cost_usd / s.budget_usd
            colour = "$error" if share >= 1 or s.status == "budget_stopped" else (
                "$warning" if share >= 0.8 else "$foreground")
            cost = f"[{colour}]{cost}/${s.budget_usd:,.2f}[/]"
        month = "" if s.projected_month_usd is None else f" ≈${s.projected_month_usd:,.0f}/mo"
        gws = escape(",".join(s.gateways))
        canary_short = escape(s.canary.replace("canary ", "").replace("progressing ", "")
                              .replace("canary: off", "no canary"))
        keys_short = keys.replace("keys ", "k")
        line1 = fit_parts([
            (0, f"{badge} {gws} [b]{state}[/] {s.elapsed_s:,.1f}s"), (0, pct, pct_short),
            (1, escape(s.canary), canary_short), (1, keys, keys_short),
            (2, f"{s.in_flight}/{s.concurrency} fly"), (3, f"{s.calls_per_s:,.0f}/s"),
            (3, escape(s.run_id)),
        ], width)
        line2 = fit_parts([
            (0, f"{rate_txt} {p95_txt}"),
            *([(1, "[reverse $warning]CLIENT-BOUND[/]", "[$warning]CB[/]")]
              if s.client_bound else []),
            (2, other_txt),
            (3, f"p50 {fmt.ms(s.latency_ms[0])} p99 {fmt.ms(s.latency_ms[2])} ms"),
            (0, f"{cost}{month}"),
            (4, f"ttft {fmt.ms(s.ttft_ms[0])}/{fmt.ms(s.ttft_ms[1])}"),
            (5, f"tok {fmt.thousands(s.tokens_in)}/{fmt.thousands(s.tokens_out)}"),
            *([(1, escape(message))] if message else []),
        ], width)
        self.update(Content.from_markup(f"{line1}\n{line2}"))


class LatencyHistogram(Static):
    def show(self, s: Snapshot | None, sparkline: str) -> None:
        if s is None:
            self.update("")
            return
        peak = max(s.histogram) or 1
        labels = [f"≤{e}" for e in HIST_EDGES_MS] + [f">{HIST_EDGES_MS[-1]}"]
        bars = []
        for label, n in zip(labels, s.histogram, strict=True):
            if n:
                bars.append(f"{label:>6} {'█' * max(1, round(12 * n / peak)):<12} {n}")
        if len(bars) > 5:  # the 4 fullest buckets and the slowest one, in order
            counts = [int(b.rsplit(" ", 1)[1]) for b in bars]
            keep = set(sorted(range(len(bars) - 1), key=lambda i: -counts[i])[:4])
            keep.add(len(bars) - 1)
            bars = [b for i, b in enumerate(bars) if i in keep]
        lines = bars
        self.update("\n".join([f"/s {sparkline}", *lines]))


SPARK = " ▁▂▃▄▅▆▇█"


def sparkline_text(values: tuple[int, ...], width: int = 22) -> str:
    values = values[-width:]
    if not values:
        return ""
    top = max(values) or 1
    return "".join(SPARK[min(8, round(8 * v / top))] for v in values)


class EventLog(RichLog, can_focus=True):
    """Append-only: each refresh writes just the lines that are new. Focused (`l`) it
    holds still so it can be read back; `G` follows the newest lines again."""

    MAX_LINES = 500

    def __init__(self, **kw: Any) -> None:
        super().__init__(max_lines=self.MAX_LINES, wrap=False, markup=False, highlight=False,
                         **kw)
        self._last: str | None = None
        self._lines: deque[str] = deque(maxlen=self.MAX_LINES)  # as written, unfitted
        self._fitted_to = 0

    def reset(self) -> None:
        """A new source: forget the previous run's lines."""
        self.clear()
        self._lines.clear()
        self._last = None
        self.auto_scroll = True

    def _width(self) -> int:
        return self.scrollable_content_region.width

    def hold(self) -> None:
        self.auto_scroll = False

    def on_resize(self, event: Resize) -> None:
        super().on_resize(event)
        # following: a shorter log (the terminal or the layout around it changed) still
        # shows the newest line — RichLog scrolls only on a write, so a height that
        # settled after the last write hid it (seen in a snapshot under a CPU hog)
        if self._width() != self._fitted_to and self._lines:
            # each line is fitted to the width it is shown at: write them again
            self.clear()
            self._fitted_to = width = self._width()
            for line in self._lines:
                self.write(fit_line(line, width))
        if self.auto_scroll:
            self.scroll_end(animate=False)

    def follow(self) -> None:
        self.auto_scroll = True
        self.scroll_end(animate=False)

    def feed(self, lines: tuple[str, ...]) -> None:
        if not lines:
            return
        new = lines
        if self._last is not None and self._last in lines:
            new = lines[lines.index(self._last) + 1:]
        self._fitted_to = width = self._width()
        for line in new:
            line = shown(line)  # a task id, a gateway's error: shown, never obeyed
            self._lines.append(line)
            self.write(fit_line(line, width))
        self._last = lines[-1]
