"""How late the engine's own event loop runs what is due: the client's scheduling delay.

A call's latency is taken when the engine handles its last byte. When the engine process
is short of CPU (too many calls in flight for two cores, a busy machine, the console in
the same process), every completion is handled late and the gateway looks slower than it
is: on the 2-core machine 100 in flight on the `gateway` profile read p95 356–370 ms
against the profile's 278. A timer every 50 ms measures that lateness; when its p95 over
the last window passes CLIENT_BOUND_MS the latency figures are the client's, not the
gateway's, and no SLA breach or canary latency verdict is drawn from them.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque

from hdrh.histogram import HdrHistogram

from swarm_tui.core.summary import CLIENT_BOUND_MS

INTERVAL_S = 0.05
WINDOW_S = 10.0
KEEP_S = 1800.0  # samples kept for "since" questions (a canary stage): 36,000 at most
MIN_SAMPLES = 20  # one second of ticks before any verdict


class LoopLag:
    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._recent: deque[tuple[float, float]] = deque()  # (wall time, lag ms), KEEP_S
        # the whole run in a sketch (as LiveMetrics keeps latency): O(1) per tick, bounded
        self._all = HdrHistogram(1, 3_600_000_000, 2)  # µs
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ticks = 0
        # the last window's p95, computed on the engine's loop: the console reads it from
        # its own thread, which must never iterate the deque the loop appends to
        self._recent_p95: float | None = None
        # the p95 the canary's last evaluation judged its stage with: published in the
        # heartbeat, so `canary status` elsewhere judges the same stage with the same lag
        self.judged_ms: float | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._schedule(self._loop.time())

    def _schedule(self, now: float) -> None:
        assert self._loop is not None
        due = now + INTERVAL_S
        self._handle = self._loop.call_at(due, self._tick, due)

    def _tick(self, due: float) -> None:
        assert self._loop is not None
        now = self._loop.time()
        lag = max(0.0, (now - due) * 1000.0)
        wall = time.time()
        self._recent.append((wall, lag))
        while self._recent and self._recent[0][0] < wall - KEEP_S:
            self._recent.popleft()
        self._all.record_value(max(1, int(lag * 1000)))
        self._ticks += 1
        if self._ticks % 5 == 0:  # 4× a second: what other threads read (the console)
            self._recent_p95 = self.p95_since_ms(wall - self.window_s)
        self._schedule(now)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    @staticmethod
    def _p95(values: list[float]) -> float | None:
        # fewer than a second of samples says nothing: the p95 of 13 would be the launch
        # burst's single late tick (the 0.7 s team demo read "client-bound" on it)
        if len(values) < MIN_SAMPLES:
            return None
        return values[max(0, int(0.95 * len(values) + 0.999999) - 1)]

    def p95_since_ms(self, since: float) -> float | None:
        """The scheduling delay's p95 since a wall-clock time (None: no sample). Only on
        the engine's own loop (the canary controller, the writer). Reads the newest
        samples back to `since`, not the whole half hour kept."""
        newest = itertools.takewhile(lambda s: s[0] >= since, reversed(self._recent))
        return self._p95(sorted(lag for _, lag in newest))

    def recent_p95_ms(self) -> float | None:
        """Over the last window, as of the last quarter second (safe from any thread)."""
        return self._recent_p95

    def run_p95_ms(self) -> float | None:
        if self._all.get_total_count() < MIN_SAMPLES:
            return None
        return self._all.get_value_at_percentile(95) / 1000.0

    def run_max_ms(self) -> float | None:
        return self._all.get_max_value() / 1000.0 if self._all.get_total_count() else None

    def client_bound(self) -> bool:
        """True when the latency of the last window says more about this process than
        about the gateway."""
        p95 = self.recent_p95_ms()
        return p95 is not None and p95 >= CLIENT_BOUND_MS
