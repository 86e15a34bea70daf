"""Two moments of a replay side by side (issue 35: mark with `m`, move, `c`): what changed
between them — tasks ended, success, latency, error classes, keys, the canary."""

from __future__ import annotations

from swarm_tui.core.moments import iso
from swarm_tui.core.states import TaskState
from swarm_tui.engine.snapshot import Snapshot


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} ms"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def _stage(s: Snapshot) -> str:
    """The canary's stage and status (`canary 25% progressing`), without its timer."""
    view = s.canary_view
    if view is not None:
        return f"canary {view.state.pct}% {view.state.status}"
    return " ".join(s.canary.split()[:3])


def compare_text(a: Snapshot, a_at: float, b: Snapshot, b_at: float) -> str:
    """A before (the mark) and B after (the moment shown), as the on-call reads them."""
    first, second = (a, b) if a_at <= b_at else (b, a)
    t1, t2 = min(a_at, b_at), max(a_at, b_at)
    rows = [f"from {iso(t1)} to {iso(t2)} ({t2 - t1:.1f} s)", ""]
    for state in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED):
        n1, n2 = first.counts.get(state, 0), second.counts.get(state, 0)
        rows.append(f"{state:<10} {n1:>8,} → {n2:>8,}  ({n2 - n1:+,})")
    rows.append(f"{'calls':<10} {first.calls:>8,} → {second.calls:>8,}  "
                f"({second.calls - first.calls:+,})")
    rows.append(f"{'per call':<10} {_pct(first.call_success_rate):>8} → "
                f"{_pct(second.call_success_rate):>8}")
    rows.append(f"{'per task':<10} {_pct(first.success_rate):>8} → "
                f"{_pct(second.success_rate):>8}")
    for name, i in (("p50", 0), ("p95", 1), ("p99", 2)):
        rows.append(f"{name:<10} {_ms(first.latency_ms[i]):>8} → {_ms(second.latency_ms[i]):>8}")
    rows.append(f"{'cost':<10} ${first.cost_usd:>7.4f} → ${second.cost_usd:>7.4f}  "
                f"(+${second.cost_usd - first.cost_usd:.4f})")
    classes = sorted(set(first.errors) | set(second.errors))
    if classes:
        rows += ["", "failed tasks by error class"]
        for c in classes:
            n1, n2 = first.errors.get(c, 0), second.errors.get(c, 0)
            rows.append(f"  {c:<16} {n1:>6} → {n2:>6}  ({n2 - n1:+})")
    keys1 = {(k.gateway, k.fingerprint): k for k in first.keys}
    moved = [(k, keys1.get((k.gateway, k.fingerprint))) for k in second.keys]
    if moved:
        rows += ["", "keys"]
        for k, before in moved:
            was = before.state if before is not None else "-"
            limited = k.rate_limited - (before.rate_limited if before is not None else 0)
            calls = k.calls - (before.calls if before is not None else 0)
            rows.append(f"  {k.fingerprint:<17} {was:>8} → {k.state:<8} {calls:+,} calls, "
                        f"{limited:+} 429s")
    stage1, stage2 = _stage(first), _stage(second)
    if stage1 != stage2:  # (its bake timer moves on its own: not a change)
        rows += ["", f"canary  {stage1} → {stage2}"]
    return "\n".join(rows)
