"""The states of a task, an attempt and a run: what the engine sets, the store keeps
and every screen and report reads — so they import nothing (issue 33's floor; the
stored-run commands no longer import the engine and pydantic's models to read them)."""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    """A task's state: the grid's cells, the store's `results.state`."""

    QUEUED = "queued"
    RUNNING = "running"      # request sent, no token yet
    STREAMING = "streaming"  # tokens arriving
    RETRYING = "retrying"    # waiting out a backoff / Retry-After
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class AttemptOutcome(StrEnum):
    """One call's outcome (`attempts.outcome`)."""

    RUNNING = "running"
    OK = "ok"
    ERROR = "error"
    CANCELLED = "cancelled"


class RunStatus(StrEnum):
    """A run's status (`runs.status`), plus the states only ever shown: `interrupted`
    (marked running, its executor gone), `paused`, `unsaved` (the store failed)."""

    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    BUDGET_STOPPED = "budget_stopped"
    INTERRUPTED = "interrupted"
    PAUSED = "paused"
    UNSAVED = "unsaved"


class KeyState(StrEnum):
    """An API key's state in a pool (`key_state.state`, `key_changes.state`)."""

    ACTIVE = "active"
    COOLING = "cooling"     # a 429 or quota: back at `cooling_until`
    DISABLED = "disabled"   # by hand; `keys enable` brings it back
    RETIRED = "retired"     # rotated out: never used again


PERMIT_HOLD = "permit"  # the runner's hold while its send permit (a worker's lease) refuses


QUEUED, RUNNING, STREAMING, RETRYING = (TaskState.QUEUED, TaskState.RUNNING,
                                        TaskState.STREAMING, TaskState.RETRYING)
SUCCEEDED, FAILED, CANCELLED = TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED
FINAL_STATES = frozenset({SUCCEEDED, FAILED, CANCELLED})
STATES = tuple(TaskState)
