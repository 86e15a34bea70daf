"""Run summaries: the `--json` contract of `run` and `report`, computed from task rows.

The same function serves a live run (agent records) and a stored one (database
rows), so `run` and `report` print identical figures for the same run.

Percentiles are nearest-rank over succeeded tasks: sort the values, take the
value at 1-based rank ceil(p/100 * n).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Protocol

from swarm_tui.core.plain import shallow
from swarm_tui.core.record import field, record
from swarm_tui.core.states import TaskState
from swarm_tui.core.usage import Usage

# Past this scheduling delay (p95, ms) of the engine's own loop the latency figures are the
# client's, not the gateway's (engine/looplag.py measures it; the canary reads it too): 20 ms
# moves a 350 ms p95 by ~6 %, enough to turn a pass into a breach near the SLA.
CLIENT_BOUND_MS = 20.0


class SlaConfig(Protocol):
    """The SLA a summary is judged by (settings/sections.py validates it)."""

    @property
    def p95_ms(self) -> float: ...
    @property
    def min_success(self) -> float: ...
    @property
    def success_basis(self) -> str: ...


class TaskRow(Protocol):
    state: str
    model: str
    gateway: str
    bucket: str
    latency_ms: float | None
    ttft_ms: float | None
    queue_ms: float
    tokens_in: int
    tokens_out: int
    cached_in: int
    usage_estimated: bool
    cost_usd: float | None
    error_class: str | None
    @property
    def calls_ok(self) -> int: ...       # answered calls of the task (its retries included)
    @property
    def calls_failed(self) -> int: ...


def nearest_rank(sorted_values: Sequence[float], p: float) -> float | None:
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


@record(kw_only=True)
class Percentiles:
    """Nearest-rank p50 / p95 / p99 and the mean of a set of values (ms)."""

    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    mean: float | None = None

    @classmethod
    def of(cls, values: list[float]) -> Percentiles:
        if not values:
            return cls()
        values.sort()
        return cls(
            p50=nearest_rank(values, 50), p95=nearest_rank(values, 95),
            p99=nearest_rank(values, 99), mean=sum(values) / len(values),
        )


@record(kw_only=True)
class Tokens:
    """Tokens of succeeded tasks, as the gateways reported them (or estimated)."""

    input: int = 0
    output: int = 0
    cached_input: int = 0
    estimated_tasks: int = 0  # tasks whose usage the gateway did not report


@record(kw_only=True)
class Stats:
    """A set of tasks' outcomes, calls, latencies, tokens and cost."""

    total: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    unfinished: int = 0
    success_rate: float | None = None  # per task: succeeded / (succeeded + failed)
    # per call, as the team measures a gateway: answered calls that succeeded, retries and
    # 429s counted (a task rescued by a retry is one success and one failure here)
    calls: int = 0
    call_success_rate: float | None = None
    latency_ms: Percentiles = field(default_factory=Percentiles)
    ttft_ms: Percentiles = field(default_factory=Percentiles)
    queue_ms: Percentiles = field(default_factory=Percentiles)
    tokens: Tokens = field(default_factory=Tokens)
    cost_usd: float = 0.0  # priced tasks only; see unpriced_tasks
    cost_per_task_usd: float | None = None
    unpriced_tasks: int = 0
    unpriced_models: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)


@record(kw_only=True)
class SlaVerdict:
    """The run judged against its SLA: met, breached (and why) or inconclusive."""

    p95_ms: float
    min_success: float
    met: bool
    breaches: list[str]
    success_basis: str = "call"  # which success rate was judged: call | task
    # the only breach was latency while the client was the bottleneck: neither met nor
    # breached (exit 0, said on the SLA line)
    inconclusive: str | None = None


@record(kw_only=True)
class RunSummary(Stats):
    """A run's summary: the `--json` object of `run` and `report`."""

    run_id: str
    name: str | None = None
    status: str = "finished"
    simulated: bool = False
    started_at: float | None = None  # unix seconds
    wall_ms: float = 0.0
    calls_per_s: float | None = None
    sla: SlaVerdict | None = None
    by_model: dict[str, Stats] = field(default_factory=dict)
    by_gateway: dict[str, Stats] = field(default_factory=dict)
    by_bucket: dict[str, Stats] = field(default_factory=dict)
    # tasks whose stored attempts show them sent more than once (two executors, or a result
    # lost in a crash window): each such send was paid
    sent_twice: int = 0
    # calls sent whose answers were lost with their executor (kill -9): may have been paid
    sent_lost: int = 0
    sent_lost_tokens_in: int = 0  # their prompts, estimated
    # the engine's own scheduling delay over the run (engine/looplag.py): when its p95
    # passes the threshold the latency figures are the client's, marked client-bound
    client_lag_p95_ms: float | None = None
    client_lag_max_ms: float | None = None
    client_bound: bool = False


class StatsBuilder:
    """Stats fed one task row at a time: per row it keeps only the floats percentiles need
    (8 bytes each, in arrays), so a 100,000-task run is summed without holding its rows."""

    def __init__(self) -> None:
        self.total = self.succeeded = self.failed = self.cancelled = self.unfinished = 0
        self.calls = self.calls_ok = 0
        self.lat, self.ttft, self.queue = array("d"), array("d"), array("d")
        self.errors: Counter[str] = Counter()
        self.used = Usage()

    def add(self, r: TaskRow) -> None:
        self.total += 1
        self.calls_ok += r.calls_ok
        self.calls += r.calls_ok + r.calls_failed
        state = r.state
        if state == TaskState.SUCCEEDED:
            self.succeeded += 1
            if r.latency_ms is not None:
                self.lat.append(r.latency_ms)
            if r.ttft_ms is not None:
                self.ttft.append(r.ttft_ms)
            self.queue.append(r.queue_ms)
            self.used.add(r.tokens_in, r.tokens_out, r.cost_usd, cached_in=r.cached_in,
                          estimated=r.usage_estimated, model=r.model)
        elif state == TaskState.FAILED:
            self.failed += 1
            self.errors[r.error_class or "other"] += 1
        elif state == TaskState.CANCELLED:
            self.cancelled += 1
        else:
            self.unfinished += 1

    def stats(self) -> Stats:
        used = self.used
        ended = self.succeeded + self.failed
        return Stats(
            total=self.total, succeeded=self.succeeded, failed=self.failed,
            cancelled=self.cancelled, unfinished=self.unfinished,
            success_rate=self.succeeded / ended if ended else None,
            calls=self.calls,
            call_success_rate=self.calls_ok / self.calls if self.calls else None,
            latency_ms=Percentiles.of(sorted(self.lat)), ttft_ms=Percentiles.of(sorted(self.ttft)),
            queue_ms=Percentiles.of(sorted(self.queue)),
            tokens=Tokens(input=used.tokens_in, output=used.tokens_out,
                          cached_input=used.cached_in, estimated_tasks=used.estimated_tasks),
            cost_usd=used.cost_usd, cost_per_task_usd=used.cost_per_task_usd,
            unpriced_tasks=used.unpriced_tasks, unpriced_models=sorted(used.unpriced_models),
            errors=dict(self.errors))


def compute_stats(rows: Iterable[TaskRow]) -> Stats:
    acc = StatsBuilder()
    for r in rows:
        acc.add(r)
    return acc.stats()


def sla_verdict(stats: Stats, sla: SlaConfig, client_lag_p95_ms: float | None = None
                ) -> SlaVerdict:
    breaches = []
    inconclusive = None
    p95 = stats.latency_ms.p95
    if p95 is not None and p95 > sla.p95_ms:
        # inconclusive only when the client's own delay could explain the breach: less
        # that delay, still over the SLA is a breach whatever the client's load
        if (client_lag_p95_ms is not None and client_lag_p95_ms >= CLIENT_BOUND_MS
                and p95 - client_lag_p95_ms <= sla.p95_ms):
            inconclusive = (f"client-bound: p95 {p95:.0f} ms > {sla.p95_ms:.0f} ms, but this "
                            f"process ran its work {client_lag_p95_ms:.0f} ms late (p95) — "
                            "fewer calls in flight or more cores to judge the gateway")
        else:
            breaches.append(f"p95 {p95:.0f} ms > {sla.p95_ms:.0f} ms")
    basis = sla.success_basis
    judged = stats.call_success_rate if basis == "call" else stats.success_rate
    if basis == "call" and judged is None:
        basis, judged = "task", stats.success_rate  # no call figures (an old run's summary)
    if judged is None or judged < sla.min_success:
        rate = "n/a" if judged is None else f"{judged:.2%}"
        breaches.append(f"{basis} success {rate} < {sla.min_success:.0%}")
    return SlaVerdict(p95_ms=sla.p95_ms, min_success=sla.min_success,
                      met=not breaches and inconclusive is None, breaches=breaches,
                      success_basis=basis, inconclusive=inconclusive if not breaches else None)


class SummaryBuilder:
    """The run's stats and its breakdowns by model, gateway and bucket, in one pass."""

    GROUPS = ("model", "gateway", "bucket")

    def __init__(self) -> None:
        self.overall = StatsBuilder()
        self.groups: dict[str, dict[str, StatsBuilder]] = {g: {} for g in self.GROUPS}

    def add(self, r: TaskRow) -> None:
        self.overall.add(r)
        for attr, groups in self.groups.items():
            key = getattr(r, attr)
            acc = groups.get(key)
            if acc is None:
                acc = groups[key] = StatsBuilder()
            acc.add(r)

    def summary(
        self, *, run_id: str, sla: SlaConfig, wall_ms: float, name: str | None = None,
        status: str = "finished", simulated: bool = False, started_at: float | None = None,
        client_lag: tuple[float | None, float | None] = (None, None),
    ) -> RunSummary:
        """`client_lag`: the engine loop's scheduling delay over the run (p95, max) in ms."""
        overall = self.overall.stats()
        lag_p95, lag_max = client_lag
        summary = RunSummary(
            **shallow(overall), run_id=run_id, name=name, status=status,
            simulated=simulated, started_at=started_at, wall_ms=wall_ms,
            # calls, not tasks: every answered call, retries included (tasks per second
            # read 0.5-13 % low on runs with retries)
            calls_per_s=(overall.calls / (wall_ms / 1000.0) if wall_ms else None),
            sla=sla_verdict(overall, sla, lag_p95),
            client_lag_p95_ms=lag_p95, client_lag_max_ms=lag_max,
            client_bound=lag_p95 is not None and lag_p95 >= CLIENT_BOUND_MS,
        )
        for attr, target in (("model", summary.by_model), ("gateway", summary.by_gateway),
                             ("bucket", summary.by_bucket)):
            groups = self.groups[attr]
            for key in sorted(groups):
                target[key] = groups[key].stats()
        return summary


def summarize(
    rows: Iterable[TaskRow], *, run_id: str, sla: SlaConfig, wall_ms: float,
    name: str | None = None, status: str = "finished", simulated: bool = False,
    started_at: float | None = None, client_lag: tuple[float | None, float | None] = (None, None),
) -> RunSummary:
    """`client_lag`: the engine loop's scheduling delay over the run (p95, max) in ms."""
    builder = SummaryBuilder()
    for r in rows:
        builder.add(r)
    return builder.summary(run_id=run_id, sla=sla, wall_ms=wall_ms, name=name, status=status,
                           simulated=simulated, started_at=started_at, client_lag=client_lag)
