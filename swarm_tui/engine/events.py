"""Typed events the runner emits. Consumers are plain callables, called inline:
keep their per-event work tiny (append to a batch, bump a counter)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from swarm_tui.engine.state import Agent, Attempt

QUEUED = "queued"
STARTED = "started"
FIRST_TOKEN = "first_token"
PROGRESS = "progress"
RETRY_SCHEDULED = "retry_scheduled"
FALLBACK = "fallback"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
RUN_STARTED = "run_started"
RUN_FINISHED = "run_finished"
CONTROL = "control"  # pause / resume / concurrency / cancel

FINAL_KINDS = frozenset({SUCCEEDED, FAILED, CANCELLED})


@dataclass(slots=True, frozen=True)
class Event:
    kind: str
    at_ms: float                 # since run start
    agent: Agent | None = None   # the live record: copy what you keep, it will change
    attempt: Attempt | None = None
    detail: str | None = None


Consumer = Callable[[Event], None]
