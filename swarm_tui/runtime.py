"""Process-wide runtime settings for a swarm: the garbage collector's thresholds.

A swarm allocates fast (stream chunks, events, attempts) and keeps a large live heap (tasks,
agents, cells), so CPython's default thresholds (700, 10, 10) run a collection of the older
generations every few thousand allocations, each walking every tracked object of them.
Measured with `bench/ui.py` (1,000 agents streaming, console at 80x24, 60 key presses
each): defaults — key-press p99 231 ms, the console costing +42 points of a core over a
headless run; (20000, 20, 100) — p99 72 ms, +24 points; (50000, 50, 1000) — p99 99 ms.
Young cycles (asyncio tasks, exceptions with their tracebacks) are still collected in the
first generation; only the walks of the long-lived heap become rare.
"""

from __future__ import annotations

import gc
import os

SWARM_GC_THRESHOLDS = (20_000, 20, 100)
ENV = "SWARM_TUI_GC_THRESHOLDS"  # "700,10,10": CPython's own (bench/ui.py's baseline)


def tune_gc() -> None:
    """Once per process, before a swarm starts (idempotent). A malformed override is
    ignored: a tuning knob never stops a run."""
    thresholds: tuple[int, ...] = SWARM_GC_THRESHOLDS
    raw = os.environ.get(ENV)
    if raw:
        try:
            parsed = tuple(int(x) for x in raw.split(","))
        except ValueError:
            parsed = ()
        if len(parsed) == 3 and all(x >= 0 for x in parsed):
            thresholds = parsed
    gc.set_threshold(*thresholds)
