"""What the console reads a run through: one protocol for a live run in this process and
for a run in the store (watched while another process executes it, or replayed)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from swarm_tui.core.commands import Command
from swarm_tui.core.records import KeyRow
from swarm_tui.engine.cost import CostReport
from swarm_tui.engine.snapshot import Snapshot

if TYPE_CHECKING:
    from swarm_tui.canary.controller import CanaryView
    from swarm_tui.settings.sections import CanaryConfig


@dataclass
class TaskDetail:
    seq: int
    task_id: str
    state: str
    model: str
    gateway: str
    bucket: str
    key_fp: str | None
    prompt: str
    latency_ms: float | None
    ttft_ms: float | None
    queue_ms: float
    tokens_in: int
    tokens_out: int
    cost_usd: float | None
    error: str | None
    response_text: str | None
    attempts: list[dict[str, Any]] = field(default_factory=list)


class RunSource(Protocol):
    """Everything the console asks of a run — the console probes no attribute beyond
    these. `kind`: live (executed by this process) | watch | replay."""

    kind: str
    readonly: bool
    error: str | None
    at: float | None  # the moment a replay shows (unix s); None: now

    @property
    def active(self) -> bool: ...
    @property
    def paused(self) -> bool: ...
    async def start(self) -> None:
        """Live: execute the run (returns at its end). Stored: open it (returns at once)."""
    async def snapshot(self) -> Snapshot | None: ...
    async def detail(self, seq: int) -> TaskDetail | None: ...
    async def control(self, command: Command, arg: str | None = None) -> bool: ...
    async def keys(self) -> tuple[tuple[KeyRow, ...], str | None]: ...
    async def cost(self) -> CostReport | None: ...
    async def key_op(self, op: str, ref: str, secret: str | None = None,
                     label: str | None = None) -> str: ...
    def canary_live(self) -> tuple[CanaryConfig, CanaryView | None] | None:
        """This process's canary controller's config and latest evaluation (live runs
        with a canary); None: the canary is read from and acted on in the store."""
    async def canary_act(self, action: str, arg: str | None, reason: str | None) -> bool:
        """Through the live controller; False: the caller acts on the stored canary."""
    async def shutdown(self) -> None: ...


class RowObserver(Protocol):
    """Takes a followed run's stored rows, each once (what `watch --metrics-port` counts):
    ops.metrics.RunMetrics is one, fed here from rows as it is fed from engine events live."""

    def count_call(self, gateway: str, model: str, bucket: str, outcome: str,
                   error_class: str | None, latency_ms: float | None,
                   ttft_ms: float | None) -> None: ...
    def count_task(self, gateway: str, model: str, bucket: str, state: str, tokens_in: int,
                   tokens_out: int, cost_usd: float | None) -> None: ...
    def set_gauges(self, *, in_flight: int, concurrency: int, remaining: int, paused: bool,
                   keys: Iterable[KeyRow], lag_s: float | None, canary_pct: float | None,
                   gates: Iterable[tuple[str, str]] = ()) -> None: ...
    def end(self) -> None: ...
