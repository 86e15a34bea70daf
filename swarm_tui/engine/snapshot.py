"""Live metrics (an event consumer) and the snapshot the console reads at a fixed rate.

Per event the consumer does O(1) work; percentiles come from HdrHistogram sketches,
so a snapshot costs the same at 100 or 10,000 agents (plus one pass over the
agent states for the grid).
"""

from __future__ import annotations

import heapq
import itertools
import math
import operator
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from hdrh.histogram import HdrHistogram

from swarm_tui.core import events as ev
from swarm_tui.core.records import KeyRow
from swarm_tui.core.states import STATES, KeyState, RunStatus, TaskState
from swarm_tui.settings.sections import SlaConfig

if TYPE_CHECKING:
    from swarm_tui.core.records import TaskRecord
    from swarm_tui.engine.runner import SwarmRunner
    from swarm_tui.gateway.client import GatewayClient


LOG_LINES = 300
SPARK_SECONDS = 60
HIST_EDGES_MS = (50, 100, 150, 200, 250, 300, 350, 500, 750, 1000, 2000)


class TaskCell(NamedTuple):
    """What the grid needs for one agent (a tuple: 100,000 of them are built to replay a
    moment, ~4x faster than a frozen dataclass's)."""

    seq: int
    task_id: str
    state: str
    model: str
    bucket: str
    latency_ms: float | None
    cost_usd: float | None
    attempts: int
    error_class: str | None


@dataclass(frozen=True, slots=True)
class SlotCell:
    """One agent of the swarm — a concurrency slot — and the call it is making now."""

    slot: int
    cell: TaskCell | None      # None: idle
    started_s: float | None     # run seconds when its current call was sent
    chars: int | None           # streamed characters so far (None: not known here)


def key_rows(gateways: Mapping[str, GatewayClient]) -> tuple[KeyRow, ...]:
    mono, now = time.monotonic(), time.time()
    rows = []
    for gw in gateways.values():
        for k in gw.pool.slots:
            state = k.status(mono)
            until = now + (k.cooling_until - mono) if state == KeyState.COOLING else None
            reason = k.reason
            if state == KeyState.COOLING:  # which models: a 429 cools a key-model, not the key
                reason = "cooling: " + ", ".join(k.cooling_models(mono))
            rows.append(KeyRow(gw.name, k.fingerprint, k.label, k.source, state, until,
                               reason, k.in_flight, k.calls, k.rate_limited, k.errors,
                               k.tokens_in, k.tokens_out, k.last_used))
    return tuple(rows)


@dataclass(frozen=True)
class Snapshot:
    run_id: str
    simulated: bool
    gateways: tuple[str, ...]
    status: str                 # running | paused | finished | cancelled | interrupted
    elapsed_s: float
    total: int
    counts: dict[str, int]
    in_flight: int
    concurrency: int
    calls_per_s: float
    success_rate: float | None
    latency_ms: tuple[float | None, float | None, float | None]  # p50, p95, p99
    ttft_ms: tuple[float | None, float | None]
    tokens_in: int
    tokens_out: int
    cost_usd: float
    unpriced_tasks: int
    usage_estimated: bool
    projected_month_usd: float | None
    sla: SlaConfig
    cells: tuple[TaskCell, ...]     # one per task, in the workload's order
    log: tuple[str, ...]
    histogram: tuple[int, ...]      # counts per HIST_EDGES_MS bucket (+ overflow)
    sparkline: tuple[int, ...]      # completions per second, last SPARK_SECONDS
    slots: tuple[SlotCell, ...] = ()  # the agents view: one per concurrency slot
    canary: str = "canary: off"
    canary_view: Any = None         # canary.controller.CanaryView when a canary is configured
    keys: tuple[KeyRow, ...] = ()
    budget_usd: float | None = None
    waiting_for_keys: str | None = None  # a gateway whose every key is cooling
    readonly: bool = False
    source: str = "live"            # live | watch | replay
    errors: dict[str, int] = field(default_factory=dict)
    call_success_rate: float | None = None  # per answered call (retries and 429s count)
    calls: int = 0
    client_bound: bool = False      # the engine's loop runs late: latency is partly ours

    @property
    def done(self) -> int:
        c = self.counts
        return sum(c.get(s, 0) for s in (TaskState.SUCCEEDED, TaskState.FAILED,
                                         TaskState.CANCELLED))


def histogram_bucket(ms: float) -> int:
    i = 0
    while i < len(HIST_EDGES_MS) and ms > HIST_EDGES_MS[i]:
        i += 1
    return i


_CELL_KINDS = frozenset({ev.QUEUED, ev.STARTED, ev.FIRST_TOKEN, ev.RETRY_SCHEDULED,
                         ev.SUCCEEDED, ev.FAILED, ev.CANCELLED})


def _chars_of(a: TaskRecord) -> Callable[[], int]:
    """The agent's streamed characters, read when a snapshot is built."""
    return lambda: a.live_chars


def _cell(a: TaskRecord) -> TaskCell:
    return TaskCell(a.seq, a.task.id, a.state, a.model, a.bucket, a.latency_ms, a.cost_usd,
                     a.prior_attempts + a.sent, a.error_class)


class LiveMetrics:
    """A run's figures, fed one change at a time: by engine events for a live run (it is
    an event consumer), by rows newer than the last read for a watched or replayed one
    (run_sources/stored.py). Both build their Snapshot with `metrics_snapshot`, so the
    status bar, histogram, sparkline and log mean the same thing for every source.

    The grid's cells are kept up to date per change (O(1) each), so a snapshot copies a
    list instead of visiting every agent: measured, rebuilding 20,000 cells per frame was
    a quarter of a core.
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.cells: list[TaskCell | None] = []
        self.counts: Counter[str] = Counter()
        # three significant figures: whole milliseconds up to 2 s (two grouped 256–511 ms by
        # twos, and the console's p95 read 279 where the report's exact figure was 278.3)
        self.latency = HdrHistogram(1, 3_600_000, 3)  # ms
        self.ttft = HdrHistogram(1, 3_600_000, 3)
        self.succeeded = 0
        self.failed = 0
        self.calls_ok = 0      # answered calls: per-call success, as the team measures it
        self.calls_failed = 0
        self.tokens_in = 0
        self.tokens_out = 0
        self.cost_usd = 0.0
        self.unpriced = 0
        self.estimated = False
        self.errors: Counter[str] = Counter()
        self.log: deque[str] = deque(maxlen=LOG_LINES)
        self.hist = [0] * (len(HIST_EDGES_MS) + 1)
        # the agents view: each call in flight holds a slot from its send to its end, the
        # lowest free one, so an agent keeps its place on the screen while it works
        self.slot_tasks: list[int | None] = []    # slot -> cell index
        self._slot_of: dict[int, int] = {}         # cell index -> slot
        self._free_slots: list[int] = []           # a heap
        self.slot_started: dict[int, float] = {}   # cell index -> run seconds at its send
        self.slot_chars: dict[int, Callable[[], int]] = {}  # cell index -> streamed chars
        self._per_second: deque[tuple[int, int]] = deque(maxlen=SPARK_SECONDS + 5)
        start = time.monotonic()
        # seconds since the run started, for the sparkline (a stored run: its wall clock)
        self.clock = clock or (lambda: time.monotonic() - start)

    # -- the changes ------------------------------------------------------------------------
    def put_cell(self, index: int, cell: TaskCell) -> None:
        cells = self.cells
        if index >= len(cells):
            cells.extend([None] * (index + 1 - len(cells)))
        old = cells[index]
        if old is not None:
            self.counts[old.state] -= 1
        cells[index] = cell
        self.counts[cell.state] += 1

    def slot_on(self, index: int, started_s: float,
                chars: Callable[[], int] | None = None) -> None:
        slot = self._slot_of.get(index)
        if slot is None:
            if self._free_slots:
                slot = heapq.heappop(self._free_slots)
            else:
                slot = len(self.slot_tasks)
                self.slot_tasks.append(None)
            self._slot_of[index] = slot
        self.slot_started[index] = started_s
        if chars is not None:
            self.slot_chars[index] = chars
        self.slot_tasks[slot] = index

    def slot_off(self, index: int) -> None:
        slot = self._slot_of.pop(index, None)
        if slot is not None:
            self.slot_tasks[slot] = None
            heapq.heappush(self._free_slots, slot)
        self.slot_started.pop(index, None)
        self.slot_chars.pop(index, None)

    def call_ended(self, ok: bool) -> None:
        if ok:
            self.calls_ok += 1
        else:
            self.calls_failed += 1

    def task_succeeded(self, latency_ms: float | None, ttft_ms: float | None, tokens_in: int,
                       tokens_out: int, cost_usd: float | None, estimated: bool,
                       at_s: float | None = None, held: Counter[tuple[bool, int]] | None = None
                       ) -> None:
        """`held`: latencies kept back to record in one go (`record_held`): a replay
        recording 100,000 tasks records each distinct millisecond once."""
        self.succeeded += 1
        self._tick(at_s)
        # whole milliseconds, rounded as the report rounds its exact percentiles (the
        # ranks are the same either way): truncated, the console read 277 where `report`
        # and `run --json` said 278 for one run's p95
        if latency_ms is not None:
            if held is None:
                self.latency.record_value(max(1, round(latency_ms)))
            else:
                held[(True, max(1, round(latency_ms)))] += 1
            self.hist[histogram_bucket(latency_ms)] += 1
        if ttft_ms is not None:
            if held is None:
                self.ttft.record_value(max(1, round(ttft_ms)))
            else:
                held[(False, max(1, round(ttft_ms)))] += 1
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        self.estimated |= estimated
        if cost_usd is None:
            self.unpriced += 1
        else:
            self.cost_usd += cost_usd

    def record_held(self, held: Counter[tuple[bool, int]]) -> None:
        for (is_latency, ms), n in held.items():
            (self.latency if is_latency else self.ttft).record_value(ms, n)
        held.clear()

    def task_failed(self, error_class: str | None, at_s: float | None = None) -> None:
        self.failed += 1
        self._tick(at_s)
        self.errors[error_class or "other"] += 1

    def line(self, at_s: float, text: str) -> None:
        self.log.append(f"{at_s:7.1f}s {text}")

    def _tick(self, at_s: float | None) -> None:
        sec = int(self.clock() if at_s is None else at_s)
        if self._per_second and self._per_second[-1][0] == sec:
            self._per_second[-1] = (sec, self._per_second[-1][1] + 1)
        else:
            self._per_second.append((sec, 1))

    # -- the engine's events ----------------------------------------------------------------
    def __call__(self, e: ev.Event) -> None:
        kind = e.kind
        a = e.record
        if a is not None and kind in _CELL_KINDS:
            self.put_cell(a.index, _cell(a))
            if kind == ev.STARTED:
                self.slot_on(a.index, e.at_ms / 1000, _chars_of(a))
            elif kind != ev.FIRST_TOKEN:
                self.slot_off(a.index)
        if kind == ev.RETRY_SCHEDULED or (kind == ev.FAILED and e.attempt is not None
                                          and e.attempt.retry_wait_s is None):
            # every failed call ends in a retry or the task's failure (a task failed while
            # parked shows an attempt already counted at its retry)
            self.call_ended(False)
        if kind == ev.SUCCEEDED and a is not None:
            self.call_ended(True)
            self.task_succeeded(a.latency_ms, a.ttft_ms, a.tokens_in, a.tokens_out,
                                a.cost_usd, a.usage_estimated)
        elif kind == ev.FAILED and a is not None:
            self.task_failed(a.error_class)
            self.line(e.at_ms / 1000, f"FAIL   {a.id} {a.error_class} {a.status_code or ''} "
                                      f"{(a.error_message or '')[:60]}")
        elif kind == ev.RETRY_SCHEDULED and a is not None and e.attempt is not None:
            wait = e.attempt.retry_wait_s or 0.0
            self.line(e.at_ms / 1000, f"RETRY  {a.id} #{e.attempt.number} {e.detail} "
                                      f"+{wait:.2f}s")
        elif kind == ev.FALLBACK and a is not None:
            self.line(e.at_ms / 1000, f"FALLBK {a.id} {e.detail}")
        elif kind == ev.CONTROL:
            self.line(e.at_ms / 1000, f"CTRL   {e.detail}")

    # -- reading ----------------------------------------------------------------------------
    @staticmethod
    def pct(h: HdrHistogram, p: float) -> float | None:
        """Nearest rank, as the report's percentiles (docs/definitions.md): the value at
        1-based rank ⌈p/100 · n⌉ — hdrh's own rounds the rank, one value early at times."""
        n = h.get_total_count()
        if not n:
            return None
        rank = max(1, math.ceil(p * n / 100))
        seen = 0
        for index in range(h.counts_len):
            seen += h.get_count_at_index(index)
            if seen >= rank:
                return float(h.get_highest_equivalent_value(h.get_value_from_index(index)))
        return None

    def sparkline(self) -> tuple[int, ...]:
        now = int(self.clock())
        by_sec = dict(self._per_second)
        return tuple(by_sec.get(s, 0) for s in range(now - SPARK_SECONDS + 1, now + 1))

    def calls_per_s(self, window: int = 5) -> float:
        """Completions per second over the last `window` whole seconds (fewer at the start)."""
        now = int(self.clock())
        span = min(window, now)
        if span <= 0:
            return 0.0
        return sum(n for s, n in self._per_second if now - span <= s < now) / span


def metrics_snapshot(m: LiveMetrics, *, run_id: str, simulated: bool,
                     gateways: tuple[str, ...], status: str, elapsed_s: float, total: int,
                     in_flight: int, concurrency: int, sla: SlaConfig, tasks_per_day: int,
                     client_bound: bool, keys: tuple[KeyRow, ...] = (),
                     readonly: bool = False, source: str = "live",
                     budget_usd: float | None = None, waiting_for_keys: str | None = None,
                     canary: str = "canary: off", calls_per_s: float | None = None
                     ) -> Snapshot:
    """The one snapshot builder: the metrics' figures plus what the source knows of the
    run itself (status, clock, concurrency, keys)."""
    counts = m.counts
    # an index not seen yet is a gap (None). Copy first, then look for one in the copy: the
    # engine thread may extend the list while this copies it (a counter of gaps read
    # before the copy let a None through to the filter). map(is_) scans 100,000 cells in
    # ~1.4 ms (`None in` calls the dataclass __eq__ per cell: ~5 ms)
    copied = tuple(m.cells)
    gaps = any(map(operator.is_, copied, itertools.repeat(None)))
    cells: tuple[TaskCell, ...] = (
        tuple(c for c in copied if c is not None) if gaps
        else copied)  # type: ignore[assignment]  # no None in it
    slots = _slot_cells(m, copied, concurrency)
    ended = m.succeeded + m.failed
    priced = m.succeeded - m.unpriced
    per_task = m.cost_usd / priced if priced else None
    calls = m.calls_ok + m.calls_failed
    return Snapshot(
        run_id=run_id, simulated=simulated, gateways=gateways, status=status,
        elapsed_s=elapsed_s, total=total, counts={s: counts.get(s, 0) for s in STATES},
        in_flight=in_flight, concurrency=concurrency,
        calls_per_s=m.calls_per_s() if calls_per_s is None else calls_per_s,
        success_rate=m.succeeded / ended if ended else None,
        call_success_rate=m.calls_ok / calls if calls else None, calls=calls,
        latency_ms=(m.pct(m.latency, 50), m.pct(m.latency, 95), m.pct(m.latency, 99)),
        ttft_ms=(m.pct(m.ttft, 50), m.pct(m.ttft, 95)),
        tokens_in=m.tokens_in, tokens_out=m.tokens_out, cost_usd=m.cost_usd,
        unpriced_tasks=m.unpriced, usage_estimated=m.estimated,
        projected_month_usd=per_task * tasks_per_day * 30 if per_task is not None else None,
        sla=sla, cells=cells, slots=slots, log=tuple(m.log), histogram=tuple(m.hist),
        sparkline=m.sparkline(), readonly=readonly, source=source, errors=dict(m.errors),
        keys=keys, waiting_for_keys=waiting_for_keys, client_bound=client_bound,
        budget_usd=budget_usd, canary=canary,
    )


_WORKING = frozenset({TaskState.RUNNING, TaskState.STREAMING})


def _slot_cells(m: LiveMetrics, cells: tuple[TaskCell | None, ...], concurrency: int
                ) -> tuple[SlotCell, ...]:
    """One cell per slot: at least the concurrency (idle slots shown), its call if any. A
    slot whose task is no longer working (an end not seen as an event) reads idle."""
    taken = list(m.slot_tasks)  # the engine thread may change it while this reads
    out = []
    for slot in range(max(concurrency, len(taken))):
        index = taken[slot] if slot < len(taken) else None
        cell = cells[index] if index is not None and index < len(cells) else None
        if index is None or cell is None or cell.state not in _WORKING:
            out.append(SlotCell(slot, None, None, None))
            continue
        chars = m.slot_chars.get(index)
        out.append(SlotCell(slot, cell, m.slot_started.get(index),
                            chars() if chars is not None else None))
    return tuple(out)


def live_snapshot(runner: SwarmRunner, metrics: LiveMetrics, *, run_id: str, simulated: bool,
                  sla: SlaConfig, tasks_per_day: int, readonly: bool = False,
                  status: str | None = None) -> Snapshot:
    """Read the runner and the metrics; never mutate them."""
    if status is None:
        if runner.cancelled:
            status = RunStatus.CANCELLED if runner.wall_ms else RunStatus.RUNNING
        elif runner.stop_reason:
            status = runner.stop_reason  # in-flight calls may still be finishing
        elif runner.wall_ms:
            status = RunStatus.FINISHED
        else:
            status = RunStatus.PAUSED if runner.paused else RunStatus.RUNNING
    elapsed = (runner.wall_ms or (runner.now_ms() if runner.t0 else 0.0)) / 1000.0
    return metrics_snapshot(
        metrics, run_id=run_id, simulated=simulated, gateways=tuple(runner.gateways),
        status=status, elapsed_s=elapsed, total=len(runner.records), in_flight=runner.in_flight,
        concurrency=runner.limit, sla=sla, tasks_per_day=tasks_per_day,
        client_bound=runner.loop_lag.client_bound(), keys=key_rows(runner.gateways),
        readonly=readonly, budget_usd=runner.policy.budget_usd,
        waiting_for_keys=runner.waiting_for_keys)
