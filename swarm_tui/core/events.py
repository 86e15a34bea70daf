"""Typed events the runner emits. Consumers are plain callables, called inline:
keep their per-event work tiny (append to a batch, bump a counter)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from swarm_tui.core.records import Attempt, TaskRecord


class EventKind(StrEnum):
    QUEUED = "queued"
    STARTED = "started"
    FIRST_TOKEN = "first_token"
    PROGRESS = "progress"
    RETRY_SCHEDULED = "retry_scheduled"
    FALLBACK = "fallback"
    SUCCEEDED = "succeeded"  # the three final kinds carry the task state of the same name
    FAILED = "failed"
    CANCELLED = "cancelled"
    RUN_STARTED = "run_started"
    RUN_FINISHED = "run_finished"
    CONTROL = "control"  # pause / resume / concurrency / cancel / holds / key changes


# module-level names: the runner's `ev.STARTED` reads as the event it emits
QUEUED, STARTED, FIRST_TOKEN, PROGRESS = (EventKind.QUEUED, EventKind.STARTED,
                                          EventKind.FIRST_TOKEN, EventKind.PROGRESS)
RETRY_SCHEDULED, FALLBACK, CONTROL = (EventKind.RETRY_SCHEDULED, EventKind.FALLBACK,
                                      EventKind.CONTROL)
SUCCEEDED, FAILED, CANCELLED = EventKind.SUCCEEDED, EventKind.FAILED, EventKind.CANCELLED
RUN_STARTED, RUN_FINISHED = EventKind.RUN_STARTED, EventKind.RUN_FINISHED

FINAL_KINDS = frozenset({SUCCEEDED, FAILED, CANCELLED})


@dataclass(slots=True, frozen=True)
class Event:
    kind: EventKind
    at_ms: float                 # since run start
    record: TaskRecord | None = None   # the live record: copy what you keep, it will change
    attempt: Attempt | None = None
    detail: str | None = None


Consumer = Callable[[Event], None]
