"""Status bar, latency histogram and event log: cheap widgets fed from snapshots."""

from __future__ import annotations

from rich.markup import escape
from textual.content import Content
from textual.widgets import RichLog, Static

from swarm_tui.engine.live import HIST_EDGES_MS, Snapshot


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _k(n: int) -> str:
    return f"{n / 1000:,.1f}k" if n >= 10_000 else f"{n:,}"


class StatusBar(Static):
    """Two lines: who/what/state, then the SLA figures (coloured and marked with ! on breach)."""

    def show(self, s: Snapshot | None, message: str = "") -> None:
        if s is None:
            self.update(Content.from_markup(f"[b]swarm-tui[/]  {message}"))
            return
        badge = "[reverse $warning] SIMULATED [/]" if s.simulated else "[reverse $error] LIVE [/]"
        if s.source != "live":
            badge += f" [reverse $accent] {s.source.upper()} [/]"
        if s.readonly:
            badge += " [dim]read-only[/]"
        state = s.status.upper()
        if s.waiting_for_keys and s.status == "running":
            state = f"[reverse $warning]WAITING: {escape(s.waiting_for_keys)}[/]"
        keys = ""
        if s.keys:
            ok = sum(k.state == "active" for k in s.keys)
            colour = "$success" if ok == len(s.keys) else ("$warning" if ok else "$error")
            keys = f" │ [{colour}]keys {ok}/{len(s.keys)}[/]"
        pct = f"{s.done}/{s.total}"
        rate = "-" if s.success_rate is None else f"{s.success_rate * 100:.1f}%"
        ok_rate = s.success_rate is None or s.success_rate >= s.sla.min_success
        p95 = s.latency_ms[1]
        ok_p95 = p95 is None or p95 <= s.sla.p95_ms
        good, bad = "$success", "$error"
        p95_txt = f"[{good if ok_p95 else bad}]p95 {_ms(p95)}{'' if ok_p95 else '!'}[/]"
        rate_txt = f"[{good if ok_rate else bad}]ok {rate}{'' if ok_rate else '!'}[/]"
        cost = f"${s.cost_usd:,.4f}" + ("+?" if s.unpriced_tasks else "") + \
            ("~" if s.usage_estimated else "")
        if s.budget_usd:
            share = s.cost_usd / s.budget_usd
            colour = "$error" if share >= 1 or s.status == "budget_stopped" else (
                "$warning" if share >= 0.8 else "$foreground")
            cost = f"[{colour}]{cost}/${s.budget_usd:,.2f}[/]"
        month = "" if s.projected_month_usd is None else f" ≈${s.projected_month_usd:,.0f}/mo"
        # Most important first: at 80 columns the ends of the lines are cut (ellipsis).
        line1 = (f"{badge} {','.join(s.gateways)} [b]{state}[/] {s.elapsed_s:,.1f}s │ {pct} │ "
                 f"{s.in_flight}/{s.concurrency} fly │ {s.calls_per_s:,.0f}/s │ {s.canary}{keys} │ "
                 f"{s.run_id}")
        line2 = (f"{rate_txt} {p95_txt} p50 {_ms(s.latency_ms[0])} p99 {_ms(s.latency_ms[2])} ms"
                 f" │ {cost}{month} │ ttft {_ms(s.ttft_ms[0])}/{_ms(s.ttft_ms[1])} │ tok "
                 f"{_k(s.tokens_in)}/{_k(s.tokens_out)}")
        if message:
            line2 += f" │ {message}"
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
        lines = bars[-5:] if len(bars) > 5 else bars
        self.update("\n".join([f"/s {sparkline}", *lines]))


SPARK = " ▁▂▃▄▅▆▇█"


def sparkline_text(values: tuple[int, ...], width: int = 22) -> str:
    values = values[-width:]
    if not values:
        return ""
    top = max(values) or 1
    return "".join(SPARK[min(8, round(8 * v / top))] for v in values)


class EventLog(RichLog):
    """Append-only: each refresh writes just the lines that are new."""

    def __init__(self, **kw) -> None:
        super().__init__(max_lines=500, wrap=False, markup=False, highlight=False, **kw)
        self._last: str | None = None

    def feed(self, lines: tuple[str, ...]) -> None:
        if not lines:
            return
        new = lines
        if self._last is not None and self._last in lines:
            new = lines[lines.index(self._last) + 1:]
        for line in new:
            self.write(line)
        self._last = lines[-1]
