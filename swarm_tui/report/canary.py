"""Text for the canary: the baseline-vs-candidate table, gates, ladder, history lines.

Shared by `swarm-tui canary status|history` and the console panel, so both read alike.
"""

from __future__ import annotations

import time

from swarm_tui.canary.analysis import BucketFigures, Verdict
from swarm_tui.canary.state import CanaryState
from swarm_tui.core.canary import BASELINE, CANDIDATE
from swarm_tui.core.summary import Percentiles
from swarm_tui.store.canary import ActionRecord

MARK = {"pass": "✔ pass", "fail": "✖ fail", "inconclusive": "? inconclusive"}


def _pct(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v * 100:.{digits}f}%"


def _trio(p: Percentiles) -> str:
    vals = (p.p50, p.p95, p.p99)
    return "-" if p.p50 is None else "/".join(f"{v:.0f}" for v in vals if v is not None)


def _money(v: float | None, unpriced: int) -> str:
    if unpriced:
        return "unpriced"
    return "-" if v is None else f"${v:.5f}"


def _errors(f: BucketFigures) -> str:
    if not f.errors:
        return "-"
    return " ".join(f"{k} {v}" for k, v in sorted(f.errors.items(), key=lambda kv: -kv[1])[:2])


def figure_rows(figs: dict[str, BucketFigures]) -> list[tuple[str, str, str]]:
    """(label, baseline, candidate) — the team's before/after table, per bucket."""
    b, c = figs[BASELINE], figs[CANDIDATE]

    def tokens(f: BucketFigures) -> str:
        if f.tokens_in_per_task is None or f.tokens_out_per_task is None:
            return "-"
        return f"{f.tokens_in_per_task:.0f}/{f.tokens_out_per_task:.0f}"

    return [
        ("tasks", f"{b.tasks:,}", f"{c.tasks:,}"),
        ("task success", _pct(b.task_success), _pct(c.task_success)),
        ("call success", _pct(b.call_success), _pct(c.call_success)),
        ("latency p50/95/99 ms", _trio(b.latency_ms), _trio(c.latency_ms)),
        ("ttft p50/95/99 ms", _trio(b.ttft_ms), _trio(c.ttft_ms)),
        ("call errors", _errors(b), _errors(c)),
        ("tokens/task in/out", tokens(b), tokens(c)),
        ("cost/task", _money(b.cost_per_task_usd, b.unpriced),
         _money(c.cost_per_task_usd, c.unpriced)),
    ]


def figure_table(figs: dict[str, BucketFigures]) -> str:
    rows = [("", "baseline", "candidate"), *figure_rows(figs)]
    w0, w1, w2 = (max(len(r[i]) for r in rows) for i in range(3))
    return "\n".join(f"{r[0]:<{w0}}  {r[1]:>{w1}}  {r[2]:>{w2}}" for r in rows)


def verdict_lines(verdicts: list[Verdict]) -> list[str]:
    return [f"{v.gate:<10} {MARK[v.result]:<15} {v.detail}" for v in verdicts]


def ladder(state: CanaryState, stages: list[int]) -> str:
    """`0 ─ 5 ─ [25] ─ 50 ─ 100`: the current percentage in brackets."""
    steps = sorted({0, *stages, state.pct})  # a `set` percentage shows between stages
    return " ─ ".join(f"[{p}]" if p == state.pct else str(p) for p in steps)


def history_line(r: ActionRecord) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.at))
    move = f"{r.from_pct}%→{r.to_pct}%" if r.from_pct is not None else f"{r.to_pct}%"
    reason = f" — {r.reason}" if r.reason else ""
    return f"{when}  {r.action:<12} {move:<9} {r.actor} ({r.source}){reason}"
