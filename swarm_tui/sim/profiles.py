"""Latency profiles fitted to the team's 30-day measurements (MISSION.md).

Each profile is an inverse CDF through measured quantiles, interpolated in log
space, so sampled p50/p95/p99 reproduce the measurement by construction. The
tails beyond p99 and below p1 are our extrapolation.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class LatencyProfile:
    name: str
    quantiles: tuple[tuple[float, float], ...]  # (probability, ms), strictly increasing
    rate_429: float = 0.0  # default injected error rates for the profile
    rate_503: float = 0.0

    def sample_ms(self, rng: random.Random) -> float:
        u = rng.random()
        probs = [q for q, _ in self.quantiles]
        i = max(1, bisect.bisect_right(probs, u))
        if i >= len(self.quantiles):
            return self.quantiles[-1][1]
        (q0, v0), (q1, v1) = self.quantiles[i - 1], self.quantiles[i]
        if v0 == v1:
            return v0
        t = (u - q0) / (q1 - q0)
        return math.exp(math.log(v0) + t * (math.log(v1) - math.log(v0)))


# Gateway: p50 180 / p95 278 / p99 412 ms, success 99.4 % (0.6 % transient errors).
GATEWAY = LatencyProfile(
    "gateway",
    ((0.0, 110.0), (0.05, 135.0), (0.5, 180.0), (0.95, 278.0), (0.99, 412.0), (0.999, 650.0),
     (1.0, 900.0)),
    rate_429=0.003,
    rate_503=0.003,
)
# Direct provider: p50 420 / p95 720 / p99 1,100 ms, 429/503 up to 3.2 % at peak.
DIRECT = LatencyProfile(
    "direct",
    ((0.0, 230.0), (0.05, 300.0), (0.5, 420.0), (0.95, 720.0), (0.99, 1100.0), (0.999, 1700.0),
     (1.0, 2400.0)),
    rate_429=0.016,
    rate_503=0.016,
)


def get_profile(spec: str) -> LatencyProfile:
    """`gateway`, `direct`, or `fixed:<ms>` (every call takes exactly that long)."""
    if spec == "gateway":
        return GATEWAY
    if spec == "direct":
        return DIRECT
    if spec.startswith("fixed:"):
        try:
            ms = float(spec.split(":", 1)[1])
        except ValueError:
            ms = -1.0
        if not ms > 0:
            raise ValueError(f"profile {spec!r}: fixed:<ms> needs a positive number of ms")
        return LatencyProfile(spec, ((0.0, ms), (1.0, ms)))
    raise ValueError(f"unknown profile {spec!r} (gateway, direct, fixed:<ms>)")
