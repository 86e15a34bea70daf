"""Records every layer passes around and none owns: what a screen, the store and the
metrics say about a key."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KeyRow:
    """One API key as the keys panel shows it: fingerprint, never the key."""

    gateway: str
    fingerprint: str
    label: str | None
    source: str
    state: str                  # active | cooling | disabled | retired
    cooling_until: float | None  # unix seconds
    reason: str | None
    in_flight: int
    calls: int
    rate_limited: int
    errors: int
    tokens_in: int
    tokens_out: int
    last_used: float | None
