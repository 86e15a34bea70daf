"""Records every layer passes around and none owns: a task as the engine holds it (its
head, its attempts, its result), and what a screen, the store and the metrics say about a
key.

A `TaskRecord` is one task of the run, updated in place by the engine's runner; an *agent*
on the screen is a concurrency slot (engine/snapshot.py `SlotCell`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from swarm_tui.core.states import FINAL_STATES, QUEUED, STREAMING, AttemptOutcome

if TYPE_CHECKING:
    import asyncio

    from swarm_tui.workload import Task

PROGRESS_EVERY_S = 1.0  # long streams report progress; short calls never need to


@dataclass(frozen=True, slots=True)
class KeyRow:
    """One API key as the keys panel shows it: fingerprint, never the key."""

    gateway: str
    fingerprint: str
    label: str | None
    source: str
    state: str                  # active | cooling | disabled | retired
    cooling_until: float | None  # unix seconds
    reason: str | None
    in_flight: int
    calls: int
    rate_limited: int
    errors: int
    tokens_in: int
    tokens_out: int
    last_used: float | None


@dataclass(slots=True)
class TaskHead:
    """What the engine holds of a task until it is sent: what routing and the budget's
    estimate need, not its prompt (~3 KB in the team's shape, read back at the send)."""

    id: str
    user_id: str | None
    model: str | None
    max_tokens: int | None
    prompt_tokens: int       # an estimate: routing by length, usage a gateway left out
    prompt_bound: int = 0    # a guaranteed upper bound: the budget cap's ceiling

    @property
    def routing_user(self) -> str:
        return self.user_id if self.user_id is not None else self.id

    def prompt_tokens_estimate(self) -> int:
        return self.prompt_tokens


@dataclass(slots=True)
class Attempt:
    number: int              # 1-based across the whole task (fallbacks included)
    model: str
    gateway: str
    key_fp: str
    started_ms: float        # since run start, when the request was sent
    queue_ms: float          # waiting for a slot or a retry before this send
    latency_ms: float | None = None  # send → last byte
    ttft_ms: float | None = None
    status_code: int | None = None
    error_class: str | None = None
    error_message: str | None = None
    retry_wait_s: float | None = None  # wait scheduled after this attempt
    # what the engine did then, when "class status" does not say it (another key took the
    # call, none was left, a fallback): the log line's detail
    retry_detail: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cached_in: int = 0
    outcome: str = "running"  # ok | error | cancelled
    # an answer's identity, for its trace span (not stored: the export has the task's)
    response_id: str | None = None
    response_model: str | None = None
    finish_reason: str | None = None
    # reported in a retry or final event: the store books each attempt once (a task
    # cancelled or failed while waiting for its retry has no new attempt to report)
    reported: bool = False


@dataclass(slots=True, eq=False)
class TaskRecord:
    """One sub-agent = one task. Updated in place by the runner."""

    index: int               # position in this runner
    seq: int                 # the task's number in the run (stable across resumes)
    task: TaskHead           # the prompt is not held: `body` while the task is sent
    model: str
    gateway: str
    bucket: str
    fallbacks: tuple[str, ...]  # shared by the agents of one model (runner._chains)
    state: str = QUEUED
    key_fp: str | None = None
    attempts: list[Attempt] = field(default_factory=list)  # emptied once stored: `settle`
    settled_ok: int = 0          # calls_ok / calls_failed / sent of attempts let go of
    settled_failed: int = 0
    settled_sent: int = 0
    attempts_on_model: int = 0
    prior_attempts: int = 0      # attempts stored by an earlier session of this run
    route_version: int = 0       # the router's version when this task was routed
    budget_est: float = 0.0      # estimated USD of its call in flight (budget cap)
    ready_at: float = 0.0        # perf_counter when it last became ready to send
    live_chars: int = 0          # streamed characters of the current attempt
    latency_ms: float | None = None
    ttft_ms: float | None = None
    queue_ms: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    cached_in: int = 0
    usage_estimated: bool = False
    cost_usd: float | None = None
    status_code: int | None = None
    error_class: str | None = None
    error_message: str | None = None
    response_text: str | None = None
    finished_ms: float | None = None
    cancel_requested: bool = False
    progress_at: float = 0.0     # perf_counter of the last progress event
    body: Task | None = field(default=None, repr=False)  # from its first send to final
    handle: asyncio.Task[None] | asyncio.TimerHandle | None = field(default=None, repr=False)
    runner: Any = field(default=None, repr=False)
    tasks: ClassVar[int] = 1  # as a cost row: one task (a stored aggregate row sums many)

    @property
    def id(self) -> str:
        return self.task.id

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def calls_ok(self) -> int:
        """Calls of this session the gateway answered successfully."""
        return self.settled_ok + sum(1 for a in self.attempts if a.outcome == AttemptOutcome.OK)

    @property
    def calls_failed(self) -> int:
        """Calls that failed (429s, 5xx, timeouts, refusals…); cancelled ones are neither."""
        return self.settled_failed + sum(1 for a in self.attempts
                                         if a.outcome == AttemptOutcome.ERROR)

    @property
    def sent(self) -> int:
        """Attempts of this session."""
        return self.settled_sent + len(self.attempts)

    def settle(self) -> None:
        """A final task whose event is out (the store copied its attempts) keeps their
        counts only: ~0.3 KB less per finished task, 30 MB at 100,000."""
        self.settled_ok, self.settled_failed, self.settled_sent = (
            self.calls_ok, self.calls_failed, self.sent)
        self.attempts.clear()
        # dispatch-time floats a final task never reads again (24 B each)
        self.budget_est = self.ready_at = self.progress_at = 0.0

    def on_first_token(self, at: float) -> None:
        self.state = STREAMING
        self.progress_at = at
        self.runner.first_token(self, at)

    def on_progress(self, chars: int, at: float) -> None:
        """Per chunk: keep the live count; emit a progress event at most once a second."""
        self.live_chars = chars
        if at - self.progress_at >= PROGRESS_EVERY_S:
            self.progress_at = at
            self.runner.progress(self)
