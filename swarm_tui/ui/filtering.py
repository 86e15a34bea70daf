"""The `/` filter and the sort orders of the agent grid (pure functions, no Textual).

Filter words, all of which must match: `state:failed`, `model:kimi`, `bucket:candidate`,
`gateway:prod`, `error:rate`, or a regular expression on the task id. A leading `!`
inverts a word. Values match as substrings, case-insensitive.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from swarm_tui.core.states import TaskState
from swarm_tui.engine.snapshot import TaskCell

FIELDS = {"state": "state", "model": "model", "bucket": "bucket", "error": "error_class"}
SORTS = ("index", "latency", "state", "cost")
_STATE_ORDER: dict[str, int] = {s: i for i, s in enumerate(
    (TaskState.FAILED, TaskState.RETRYING, TaskState.STREAMING, TaskState.RUNNING,
     TaskState.QUEUED, TaskState.CANCELLED, TaskState.SUCCEEDED))}


class FilterError(ValueError):
    pass


def _field_test(attr: str, needle: str) -> Callable[[TaskCell], bool]:
    return lambda c: needle in str(getattr(c, attr) or "").lower()


def _id_test(pattern: str) -> Callable[[TaskCell], bool]:
    try:
        rx = re.compile(pattern, re.IGNORECASE)
    except re.error as e:
        raise FilterError(f"bad regular expression {pattern!r}: {e}") from None
    return lambda c: rx.search(c.task_id) is not None


def _negated(test: Callable[[TaskCell], bool]) -> Callable[[TaskCell], bool]:
    return lambda c: not test(c)


def parse_filter(text: str) -> Callable[[TaskCell], bool]:
    tests: list[Callable[[TaskCell], bool]] = []
    for word in text.split():
        invert = word.startswith("!")
        word = word[1:] if invert else word
        if not word:
            continue
        key, sep, value = word.partition(":")
        test = _field_test(FIELDS[key], value.lower()) if sep and key in FIELDS \
            else _id_test(word)
        tests.append(_negated(test) if invert else test)
    return lambda c: all(t(c) for t in tests)


def sort_cells(cells: list[TaskCell], order: str) -> list[TaskCell]:
    if order == "latency":
        return sorted(cells, key=lambda c: -(c.latency_ms or 0.0))
    if order == "state":
        return sorted(cells, key=lambda c: (_STATE_ORDER.get(c.state, 9), c.seq))
    if order == "cost":
        return sorted(cells, key=lambda c: -(c.cost_usd or 0.0))
    return cells
