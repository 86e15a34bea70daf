"""The collector's thresholds a swarm process runs with (swarm_tui/runtime.py)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from swarm_tui.runtime import (
    ENV,
    PARK_ENV,
    PARK_EVERY_S,
    SWARM_GC_THRESHOLDS,
    park_interval,
    park_survivors,
    tune_gc,
)


@pytest.fixture(autouse=True)
def _restore_gc():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_a_swarm_process_walks_its_long_lived_heap_rarely(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    gc.set_threshold(700, 10, 10)
    tune_gc()
    assert gc.get_threshold() == SWARM_GC_THRESHOLDS


@pytest.mark.parametrize(("raw", "expected"), [
    ("700,10,10", (700, 10, 10)),            # CPython's own: the bench's baseline
    ("nonsense", SWARM_GC_THRESHOLDS),       # a tuning knob never stops a run
    ("1,2", SWARM_GC_THRESHOLDS),
    ("-1,2,3", SWARM_GC_THRESHOLDS),
])
def test_the_thresholds_can_be_overridden(monkeypatch, raw, expected):
    monkeypatch.setenv(ENV, raw)
    tune_gc()
    assert gc.get_threshold() == expected


@pytest.mark.slow
async def test_parking_moves_what_survives_out_of_the_young_generations():
    gc.unfreeze()
    gc.collect()
    in_flight = [{"call": i} for i in range(5_000)]  # 5,000 tracked dicts, alive
    parking = asyncio.create_task(park_survivors(0.001))
    try:
        while gc.get_freeze_count() < len(in_flight):  # state, not time (pytest-timeout)
            await asyncio.sleep(0.001)
        # parked: no generation holds them, so no collection walks them again
        ids = {id(d) for d in in_flight}
        assert not any(id(o) in ids for g in range(3) for o in gc.get_objects(g))
    finally:
        parking.cancel()
        gc.unfreeze()
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize(("raw", "expected"), [
    (None, PARK_EVERY_S),
    ("0", 0.0),               # the bench's baseline: no parking
    ("1.5", 1.5),
    ("-3", 0.0),
    ("soon", PARK_EVERY_S),   # a tuning knob never stops a run
])
def test_the_parking_interval_can_be_overridden(monkeypatch, raw, expected):
    if raw is None:
        monkeypatch.delenv(PARK_ENV, raising=False)
    else:
        monkeypatch.setenv(PARK_ENV, raw)
    assert park_interval() == expected
