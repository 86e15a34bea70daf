"""Per-bucket figures and the gates: pass / fail / inconclusive. Pure functions over rows.

Task figures (latency, TTFT, tokens, cost) come from each task's final result.
The success gate counts *calls* (every attempt), not tasks: retries turn a gateway
answering 5 % 503s into ~100 % task success, hiding exactly what a canary is for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from enum import StrEnum

from swarm_tui.canary.stats import binomial_excess_p, mann_whitney_greater, wilson
from swarm_tui.core.canary import BASELINE, CANDIDATE
from swarm_tui.core.plain import EXCLUDE
from swarm_tui.core.record import field, record
from swarm_tui.core.states import TaskState
from swarm_tui.core.summary import CLIENT_BOUND_MS, Percentiles
from swarm_tui.core.usage import Usage
from swarm_tui.settings.sections import CanaryGates


class Result(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


PASS, FAIL, INCONCLUSIVE = Result.PASS, Result.FAIL, Result.INCONCLUSIVE

# (bucket, state, latency_ms, ttft_ms, tokens_in, tokens_out, cost_usd)
ResultRow = tuple[str, str, float | None, float | None, int, int, float | None]
# (bucket, outcome, error_class)
CallRow = tuple[str, str, str | None]


@record(kw_only=True)
class BucketFigures:
    """One bucket's figures (baseline or candidate) over a stage or a window."""

    tasks: int = 0
    succeeded: int = 0
    calls: int = 0
    call_errors: int = 0
    latency_ms: Percentiles = field(default_factory=Percentiles)
    ttft_ms: Percentiles = field(default_factory=Percentiles)
    errors: dict[str, int] = field(default_factory=dict)  # per call, by class
    tokens_in_per_task: float | None = None
    tokens_out_per_task: float | None = None
    cost_per_task_usd: float | None = None  # None: no succeeded task, or an unpriced one
    unpriced: int = 0
    # the succeeded tasks' latencies, for the statistical gates (never stored or shown)
    latencies: list[float] = field(default_factory=list, metadata=EXCLUDE, repr=False)

    @property
    def task_success(self) -> float | None:
        return self.succeeded / self.tasks if self.tasks else None

    @property
    def call_success(self) -> float | None:
        return (self.calls - self.call_errors) / self.calls if self.calls else None


@record(kw_only=True)
class Verdict:
    """One gate's result and the figures that decided it."""

    gate: str
    result: Result
    detail: str


@record(kw_only=True)
class Analysis:
    """Both buckets over the stage and the rolling window, and every gate's verdict."""

    at: float
    stage: dict[str, BucketFigures]
    window: dict[str, BucketFigures]
    window_s: float
    verdicts: list[Verdict]

    @property
    def overall(self) -> Result:
        results = {v.result for v in self.verdicts}
        if FAIL in results:
            return FAIL
        return INCONCLUSIVE if INCONCLUSIVE in results else PASS


def figures(results: Iterable[ResultRow], calls: Iterable[CallRow]) -> dict[str, BucketFigures]:
    lat: dict[str, list[float]] = {BASELINE: [], CANDIDATE: []}
    ttft: dict[str, list[float]] = {BASELINE: [], CANDIDATE: []}
    tasks: Counter[str] = Counter()
    used: dict[str, Usage] = {}
    for bucket, state, latency, first, t_in, t_out, cost in results:
        tasks[bucket] += 1
        if state != TaskState.SUCCEEDED:
            continue
        used.setdefault(bucket, Usage()).add(t_in, t_out, cost)
        if latency is not None:
            lat.setdefault(bucket, []).append(latency)
        if first is not None:
            ttft.setdefault(bucket, []).append(first)
    errs: dict[str, Counter[str]] = {}
    n_calls: Counter[str] = Counter()
    for bucket, outcome, error_class in calls:
        n_calls[bucket] += 1
        if outcome != "ok":
            errs.setdefault(bucket, Counter())[error_class or "other"] += 1
    out: dict[str, BucketFigures] = {}
    for bucket in (BASELINE, CANDIDATE):
        u = used.get(bucket, Usage())
        e: Counter[str] = errs.get(bucket) or Counter()
        f = BucketFigures(calls=n_calls[bucket], call_errors=sum(e.values()), errors=dict(e),
                          latency_ms=Percentiles.of(lat[bucket]),
                          ttft_ms=Percentiles.of(ttft[bucket]), latencies=lat[bucket])
        f.tasks, f.succeeded, f.unpriced = tasks[bucket], u.tasks, u.unpriced_tasks
        if u.tasks:
            f.tokens_in_per_task = u.tokens_in / u.tasks
            f.tokens_out_per_task = u.tokens_out / u.tasks
            if not u.unpriced_tasks:  # one unpriced task and the bucket's cost is unknown
                f.cost_per_task_usd = u.cost_per_task_usd
        out[bucket] = f
    return out


def evaluate(stage: dict[str, BucketFigures], gates: CanaryGates, min_samples: int,
             client_lag_ms: float | None = None) -> list[Verdict]:
    """The candidate's figures for this stage against each gate. `client_lag_ms`: the
    executor's scheduling delay (p95) over the stage — past CLIENT_BOUND_MS a latency gate
    is inconclusive only where that delay could explain the figure: a canary is never
    aborted for the client's own load, nor kept for it."""
    cand, base = stage[CANDIDATE], stage[BASELINE]
    few = f"candidate has {{n}} < {min_samples} samples"
    verdicts: list[Verdict] = []
    bound = client_lag_ms is not None and client_lag_ms >= CLIENT_BOUND_MS
    bound_detail = (f"client-bound: this process ran its work {client_lag_ms or 0:.0f} ms late "
                    f"(p95 ≥ {CLIENT_BOUND_MS:.0f}): latency says more about it than the "
                    "gateway")

    p95 = cand.latency_ms.p95
    if bound and p95 is not None and p95 > gates.p95_ms >= p95 - (client_lag_ms or 0.0):
        verdicts.append(Verdict(gate="p95", result=INCONCLUSIVE,
                                detail=f"{p95:.0f} ms vs ≤ {gates.p95_ms:.0f} ms, but "
                                       + bound_detail))
    elif cand.succeeded < min_samples or p95 is None:
        verdicts.append(Verdict(gate="p95", result=INCONCLUSIVE,
                                detail=few.format(n=cand.succeeded)))
    else:
        verdicts.append(_p95_gate(p95, cand.latencies, gates))

    rate = cand.call_success
    if cand.calls < min_samples or rate is None:
        verdicts.append(Verdict(gate="success", result=INCONCLUSIVE,
                                detail=few.format(n=cand.calls)))
    else:
        verdicts.append(_success_gate(cand, gates))

    verdicts.append(_vs_baseline(
        "cost", cand.cost_per_task_usd, base.cost_per_task_usd, 1 + gates.cost_tolerance,
        cand, base, min_samples, lambda c, b: f"${c:.5f}/task vs baseline ${b:.5f} "
                                              f"× {1 + gates.cost_tolerance:.2f}"))
    if gates.max_p95_ratio is not None:
        ratio = _vs_baseline(
            "p95-ratio", cand.latency_ms.p95, base.latency_ms.p95, gates.max_p95_ratio,
            cand, base, min_samples,
            lambda c, b: f"{c / b:.2f}× baseline p95 vs ≤ {gates.max_p95_ratio:.2f}×")
        if bound and ratio.result in (PASS, FAIL):
            ratio = _ratio_under_lag(ratio, cand, base, gates.max_p95_ratio,
                                     client_lag_ms or 0.0)
        if ratio.result == FAIL:  # past the ratio: is the candidate really slower?
            p = mann_whitney_greater(cand.latencies, base.latencies)
            alpha = 1 - gates.confidence
            ratio = Verdict(gate="p95-ratio", result=FAIL if p < alpha else PASS,
                            detail=f"{ratio.detail}; Mann-Whitney p={p:.2g} "
                                   + ("< " if p < alpha else "≥ ") + f"{alpha:.3g}"
                                   + ("" if p < alpha else ": not significant"))
        verdicts.append(ratio)
    return verdicts


def _ratio_under_lag(measured: Verdict, cand: BucketFigures, base: BucketFigures,
                     limit: float, lag: float) -> Verdict:
    """A client-bound stage: each side's latency holds up to `lag` of this process's own
    delay. Fail when even the candidate less that delay is past the limit of the baseline;
    pass when the candidate is within it of the baseline less that delay; inconclusive
    only in between — where the client's delay could explain the difference."""
    c, b = cand.latency_ms.p95, base.latency_ms.p95
    assert c is not None and b is not None
    note = f"; client-bound ({lag:.0f} ms late, p95)"
    if c - lag > b * limit:
        return Verdict(gate="p95-ratio", result=FAIL, detail=measured.detail
                       + f"{note}: {(c - lag) / b:.2f}× even less that delay")
    if c <= max(b - lag, 0.0) * limit:
        return Verdict(gate="p95-ratio", result=PASS, detail=measured.detail
                       + f"{note}: within ×{limit:.2f} of the baseline less that delay")
    return Verdict(gate="p95-ratio", result=INCONCLUSIVE, detail=measured.detail
                   + f"{note}: the client's delay could explain the difference")


def _success_gate(cand: BucketFigures, gates: CanaryGates) -> Verdict:
    """Fails when the failed calls are significantly more than the minimum allows (exact
    binomial test at the gates' confidence); otherwise it passes — Kayenta's judge: no
    significant difference is a pass — with a rate below the minimum said in the detail
    (a 99.4 % gateway reads under 99 % in one stage of 300 calls in four; "inconclusive"
    there paused the canary demo at 5 % for good). The Wilson interval is shown with it."""
    ok = cand.calls - cand.call_errors
    rate = ok / cand.calls
    low, high = wilson(ok, cand.calls, gates.confidence)
    p = binomial_excess_p(cand.call_errors, cand.calls, 1 - gates.min_success)
    top = ", ".join(f"{k} {v}" for k, v in Counter(cand.errors).most_common(2))
    detail = (f"{rate:.2%} of {cand.calls} calls vs ≥ {gates.min_success:.0%}"
              + (f" ({top})" if top else "")
              + f"; p={p:.2g}, {gates.confidence:.0%} CI {low:.1%}–{high:.1%}")
    if rate >= gates.min_success:
        return Verdict(gate="success", result=PASS, detail=detail)
    if p < 1 - gates.confidence:
        return Verdict(gate="success", result=FAIL, detail=detail)
    return Verdict(gate="success", result=PASS,
                   detail=detail + ": below, but not significantly")


def _p95_gate(p95: float, latencies: list[float], gates: CanaryGates) -> Verdict:
    """p95 ≤ the limit means at most 5 % of calls above it: fails when significantly more
    than 5 % are (exact binomial test), else passes, a p95 past the limit said in the
    detail (as the success gate: no significant difference is a pass)."""
    detail = f"{p95:.0f} ms vs ≤ {gates.p95_ms:.0f} ms"
    if p95 <= gates.p95_ms or not latencies:
        return Verdict(gate="p95", result=PASS if p95 <= gates.p95_ms else INCONCLUSIVE,
                       detail=detail)
    above = sum(1 for v in latencies if v > gates.p95_ms)
    p = binomial_excess_p(above, len(latencies), 0.05)
    detail += f"; {above / len(latencies):.1%} of {len(latencies)} above vs 5 %, p={p:.2g}"
    if p < 1 - gates.confidence:
        return Verdict(gate="p95", result=FAIL, detail=detail)
    return Verdict(gate="p95", result=PASS, detail=detail + ": above, but not significantly")


def _vs_baseline(gate: str, cand_v: float | None, base_v: float | None, limit: float,
                 cand: BucketFigures, base: BucketFigures, min_samples: int,
                 fmt: Callable[[float, float], str]
                 ) -> Verdict:
    if cand.succeeded < min_samples or base.succeeded < min_samples:
        n = min(cand.succeeded, base.succeeded)
        who = "candidate" if cand.succeeded < base.succeeded else "baseline"
        return Verdict(gate=gate, result=INCONCLUSIVE,
                       detail=f"{who} has {n} < {min_samples} samples")
    if cand_v is None or base_v is None:
        why = "unpriced model" if gate == "cost" else "no figures"
        return Verdict(gate=gate, result=INCONCLUSIVE, detail=why)
    ok = cand_v <= base_v * limit if base_v > 0 else cand_v <= 0
    return Verdict(gate=gate, result=PASS if ok else FAIL, detail=fmt(cand_v, base_v))
