"""A run's summary as text: what `run` prints at its end and `report` prints for a stored run.

Kept apart from the headless progress (run/progress.py), which needs the engine:
`report` imports this without the runner, the SDK and its HTTP stack (~0.4 s of imports).
"""

from __future__ import annotations

from swarm_tui.core import fmt
from swarm_tui.core.summary import Percentiles, RunSummary


def _cost(s: RunSummary) -> str:
    text = fmt.usd(s.cost_usd)
    if s.unpriced_tasks:
        text += f" + unpriced ({', '.join(s.unpriced_models)}: {s.unpriced_tasks} tasks)"
    if s.tokens.estimated_tasks:
        text += " (estimated usage)"
    return text


def _pcts(p: Percentiles, with_p99: bool = True) -> str:
    tail = f" / p99 {fmt.ms(p.p99)}" if with_p99 else ""
    return f"p50 {fmt.ms(p.p50)} / p95 {fmt.ms(p.p95)}{tail} ms"


def summary_text(s: RunSummary) -> str:
    label = "SIMULATED" if s.simulated else "LIVE"
    rate = "-" if s.success_rate is None else f"{s.success_rate:.1%}"
    mean = "" if s.latency_ms.mean is None else f" (mean {s.latency_ms.mean:,.1f})"
    lines = [
        f"{label} run {s.run_id} [{s.status}]: {s.total} tasks, wall {s.wall_ms:,.0f} ms, "
        f"{s.succeeded}/{s.total} succeeded ({rate}), {s.calls:,} calls "
        f"({fmt.pct(s.call_success_rate)} ok per call), latency {_pcts(s.latency_ms)}{mean}, "
        f"TTFT {_pcts(s.ttft_ms, False)}, tokens {s.tokens.input:,} in / {s.tokens.output:,} out, "
        f"cost {_cost(s)}",
    ]
    extra = []
    if s.failed:
        extra.append("failed: " + ", ".join(f"{k} {v}" for k, v in sorted(s.errors.items())))
    if s.cancelled:
        extra.append(f"cancelled: {s.cancelled}")
    if s.sent_twice:
        extra.append(f"SENT MORE THAN ONCE: {s.sent_twice} tasks (paid twice; "
                     "`export` flags them)")
    if s.sent_lost:
        extra.append(f"SENT, ANSWER LOST: {s.sent_lost} calls in flight when their executor "
                     f"died (may have been paid: ~{s.sent_lost_tokens_in:,} prompt tokens; "
                     "`cost` prices them)")
    if s.client_bound:
        extra.append(f"CLIENT-BOUND: latency includes this process's own delay (loop lag "
                     f"p95 {fmt.ms(s.client_lag_p95_ms)} ms, max {fmt.ms(s.client_lag_max_ms)})")
    if s.queue_ms.p95 is not None:
        extra.append(f"queue (not latency) {_pcts(s.queue_ms, False)}")
    for model, m in s.by_model.items():
        cost = "unpriced" if m.unpriced_tasks and not m.cost_usd else (
            fmt.usd(m.cost_usd) + (f" + {m.unpriced_tasks} unpriced" if m.unpriced_tasks else ""))
        extra.append(f"{model}: {m.succeeded}/{m.total} ok, p95 {fmt.ms(m.latency_ms.p95)} ms, "
                     f"{cost}")
    if extra:
        lines.append("  " + "; ".join(extra))
    if s.sla is not None:
        verdict = ("SLA met" if s.sla.met else
                   f"SLA inconclusive, {s.sla.inconclusive}" if s.sla.inconclusive else
                   "SLA BREACHED: " + ", ".join(s.sla.breaches))
        lines.append(
            f"  {verdict} (p95 ≤ {s.sla.p95_ms:.0f} ms, {s.sla.success_basis} success "
            f"≥ {s.sla.min_success:.0%})"
        )
    return "\n".join(lines)
