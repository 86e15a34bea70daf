"""The `/` filter and the sort orders of the agent grid (pure functions, no Textual).

Filter words, all of which must match: `state:failed`, `model:kimi`, `bucket:candidate`,
`gateway:prod`, `error:rate`, or a regular expression on the task id. A leading `!`
inverts a word. Values match as substrings, case-insensitive.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from swarm_tui.engine.snapshot import AgentCell

FIELDS = {"state": "state", "model": "model", "bucket": "bucket", "error": "error_class"}
SORTS = ("index", "latency", "state", "cost")
_STATE_ORDER = {s: i for i, s in enumerate(
    ("failed", "retrying", "streaming", "running", "queued", "cancelled", "succeeded"))}


class FilterError(ValueError):
    pass


def parse_filter(text: str) -> Callable[[AgentCell], bool]:
    tests: list[Callable[[AgentCell], bool]] = []
    for word in text.split():
        invert = word.startswith("!")
        word = word[1:] if invert else word
        if not word:
            continue
        key, sep, value = word.partition(":")
        if sep and key in FIELDS:
            attr, needle = FIELDS[key], value.lower()

            def test(c: AgentCell, attr=attr, needle=needle) -> bool:
                return needle in str(getattr(c, attr) or "").lower()
        else:
            try:
                rx = re.compile(word, re.IGNORECASE)
            except re.error as e:
                raise FilterError(f"bad regular expression {word!r}: {e}") from None

            def test(c: AgentCell, rx=rx) -> bool:
                return rx.search(c.task_id) is not None
        tests.append((lambda c, t=test: not t(c)) if invert else test)
    return lambda c: all(t(c) for t in tests)


def sort_cells(cells: list[AgentCell], order: str) -> list[AgentCell]:
    if order == "latency":
        return sorted(cells, key=lambda c: -(c.latency_ms or 0.0))
    if order == "state":
        return sorted(cells, key=lambda c: (_STATE_ORDER.get(c.state, 9), c.seq))
    if order == "cost":
        return sorted(cells, key=lambda c: -(c.cost_usd or 0.0))
    return cells
