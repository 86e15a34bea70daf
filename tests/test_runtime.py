"""The collector's thresholds a swarm process runs with (swarm_tui/runtime.py)."""

from __future__ import annotations

import gc

import pytest

from swarm_tui.runtime import ENV, SWARM_GC_THRESHOLDS, tune_gc


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
