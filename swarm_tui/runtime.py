"""Process-wide runtime settings for a swarm: the garbage collector's thresholds.

A swarm allocates fast (stream chunks, events, attempts) and keeps a large live heap (tasks,
agents, cells), so CPython's default thresholds (700, 10, 10) run a collection of the older
generations every few thousand allocations, each walking every tracked object of them.
Measured with `bench/ui.py` (1,000 agents streaming, console at 80x24, 60 key presses
each): defaults — key-press p99 231 ms, the console costing +42 points of a core over a
headless run; (20000, 20, 100) — p99 72 ms, +24 points; (50000, 50, 1000) — p99 99 ms.
Young cycles (asyncio tasks, exceptions with their tracebacks) are still collected in the
first generation; only the walks of the long-lived heap become rare.

While a run executes, `park_survivors` also freezes what is alive every quarter second. The
young generation otherwise held the 1,000 calls in flight (coroutines, streams, their
frames: 65,000-150,000 objects, since every object freed anywhere lowers the young count)
and walked them all again on each collection, 30-130 ms a time. Frozen objects are still
freed by reference counting; only a cycle that forms after its parts were frozen waits for
the run's end (measured: ~15 objects in 35 s of a run with 8 % 429/503 retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
from collections.abc import AsyncIterator

from swarm_tui.aio import cancel_and_wait

SWARM_GC_THRESHOLDS = (20_000, 20, 100)
ENV = "SWARM_TUI_GC_THRESHOLDS"  # "700,10,10": CPython's own (bench/ui.py's baseline)
PARK_EVERY_S = 0.25
PARK_ENV = "SWARM_TUI_GC_PARK_S"  # "0": never (bench/ui.py's baseline)


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


def park_interval() -> float:
    """Seconds between two parks of the survivors; 0 turns parking off."""
    raw = os.environ.get(PARK_ENV)
    if raw:
        try:
            value = float(raw)
        except ValueError:
            return PARK_EVERY_S
        return max(0.0, value)
    return PARK_EVERY_S


async def park_survivors(every_s: float) -> None:
    """Move what survived the last `every_s` out of the collector's generations, until
    cancelled (the run's end unfreezes everything, so parked cycles are collected then)."""
    while True:
        await asyncio.sleep(every_s)
        gc.freeze()


@contextlib.asynccontextmanager
async def collector_for_a_run() -> AsyncIterator[None]:
    """Around a run's execution: the long-lived heap frozen out of the generations (tasks,
    agents, prompts: full collections paused the process up to ~210 ms without it), the
    swarm's thresholds, and the survivors parked every quarter second; unfrozen after."""
    gc.freeze()
    tune_gc()
    every = park_interval()
    parking = asyncio.create_task(park_survivors(every)) if every > 0 else None
    try:
        yield
    finally:
        try:
            if parking is not None:
                await cancel_and_wait(parking)
        finally:
            gc.unfreeze()
