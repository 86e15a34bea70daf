"""Where the engine gets a task's whole body (its prompt) just before sending it.

The engine holds a `TaskHead` per task; the prompt is read at the send from whatever
keeps the workload — the store for a stored run (`store/task_bodies.py`), the list
given for a run without one — and let go of once the task is final."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from swarm_tui.workload import Task


class TaskBodies(Protocol):
    def ready(self, index: int, seq: int) -> Task | None:
        """The body if it is at hand now (no wait), else None."""
        ...

    async def load(self, index: int, seq: int) -> Task:
        """The body, waiting for it if need be; raises when it cannot be read."""
        ...

    async def aclose(self) -> None: ...


class MemoryBodies:
    """The tasks given, held in memory (runs without a store, tests)."""

    def __init__(self, tasks: Sequence[Task]) -> None:
        self._tasks = tasks

    def ready(self, index: int, seq: int) -> Task | None:
        return self._tasks[index]

    async def load(self, index: int, seq: int) -> Task:
        return self._tasks[index]

    async def aclose(self) -> None:
        return None
