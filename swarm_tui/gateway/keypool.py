"""A gateway's API keys: which one takes the next call, and each key's health.

States: active, cooling (after a 429, until a deadline that only ever extends),
disabled (401/403, with the reason), retired (no new calls; calls in flight
finish). A key leaves cooling by itself when its deadline passes.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Literal

import openai

from swarm_tui.gateway.keys import fingerprint

Strategy = Literal["least-in-flight", "round-robin", "proactive"]
ACTIVE, COOLING, DISABLED, RETIRED = "active", "cooling", "disabled", "retired"
BACKOFF_BASE_S = 1.0   # a 429 without Retry-After: 1, 2, 4 … s per consecutive 429
BACKOFF_MAX_S = 60.0


@dataclass(eq=False, slots=True)
class KeySlot:
    """A key, its fingerprint, the client built for it, and its health. The key never
    leaves memory: repr, stores and screens see the fingerprint only."""

    secret: str = field(repr=False)
    label: str | None
    client: openai.AsyncOpenAI = field(repr=False)
    source: str = "config"          # env:NAME | file | added
    fingerprint: str = ""
    state: str = ACTIVE             # active | disabled | retired (cooling is derived)
    reason: str | None = None       # why disabled
    cooling_until: float = 0.0      # monotonic deadline; only ever extended
    consecutive_429: int = 0
    in_flight: int = 0
    calls: int = 0
    rate_limited: int = 0
    errors: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    last_used: float | None = None  # unix seconds
    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    limit_reset_at: float = 0.0     # monotonic: when the gateway's window refills

    def __post_init__(self) -> None:
        self.fingerprint = fingerprint(self.secret)

    def status(self, now: float | None = None) -> str:
        if self.state != ACTIVE:
            return self.state
        now = time.monotonic() if now is None else now
        return COOLING if self.cooling_until > now else ACTIVE

    def usable(self, now: float) -> bool:
        return self.state == ACTIVE and self.cooling_until <= now

    def headroom(self, now: float) -> float:
        """Proactive strategy: calls this key can still make in the gateway's window."""
        if self.remaining_requests is None or now >= self.limit_reset_at:
            return float("inf")  # unknown or refilled: worth a try
        left = self.remaining_requests - self.in_flight
        if self.remaining_tokens is not None and self.remaining_tokens <= 0:
            left = 0
        return left


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?"
                       r"(?:(\d+(?:\.\d+)?)ms)?$")


def parse_reset(value: str | None) -> float | None:
    """x-ratelimit-reset-*: `1s`, `6m0s`, `250ms`, or plain seconds."""
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    m = _DURATION.match(value.strip())
    if not m or not any(m.groups()):
        return None
    h, mi, s, ms = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000


class KeyPool:
    def __init__(self, strategy: Strategy = "least-in-flight") -> None:
        self.strategy = strategy
        self.slots: list[KeySlot] = []
        self._rr = 0

    # -- choosing ----------------------------------------------------------------------------
    def pick(self, now: float | None = None) -> KeySlot | None:
        """The key for the next call, or None when none is usable right now."""
        now = time.monotonic() if now is None else now
        usable = [s for s in self.slots if s.usable(now)]
        if not usable:
            return None
        if self.strategy == "round-robin":
            self._rr += 1
            return usable[self._rr % len(usable)]
        if self.strategy == "proactive":
            fresh = [s for s in usable if s.headroom(now) > 0]
            if fresh:
                return max(fresh, key=lambda s: (s.headroom(now), -s.in_flight, -s.calls))
            # every key is at its limit: wait for the earliest refill rather than 429
            return None
        best = usable[0]
        for s in usable:
            if (s.in_flight, s.calls) < (best.in_flight, best.calls):
                best = s
        return best

    def next_ready_in(self, now: float | None = None) -> float | None:
        """Seconds until some key may be usable again; None if none ever will by itself."""
        now = time.monotonic() if now is None else now
        waits = []
        for s in self.slots:
            if s.state != ACTIVE:
                continue
            ready = s.cooling_until
            if self.strategy == "proactive" and s.headroom(now) <= 0:
                ready = max(ready, s.limit_reset_at)
            waits.append(max(0.0, ready - now))
        return min(waits) if waits else None

    def any_usable(self, now: float | None = None) -> bool:
        """Without choosing one (choosing moves round-robin on)."""
        now = time.monotonic() if now is None else now
        return any(s.usable(now) for s in self.slots)

    # -- what calls report ------------------------------------------------------------------
    def begin(self, slot: KeySlot) -> None:
        slot.in_flight += 1
        slot.calls += 1
        slot.last_used = time.time()

    def end(self, slot: KeySlot, *, error_class: str | None, status_code: int | None,
            message: str | None, retry_after_s: float | None, headers: dict[str, str] | None,
            tokens_in: int = 0, tokens_out: int = 0, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        slot.in_flight -= 1
        if headers:
            self._limits(slot, headers, now)
        if error_class is None:
            slot.consecutive_429 = 0
            slot.tokens_in += tokens_in
            slot.tokens_out += tokens_out
            return
        if error_class == "cancelled":
            return
        slot.errors += 1
        if status_code == 429:
            slot.rate_limited += 1
            slot.consecutive_429 += 1
            wait = retry_after_s
            if wait is None:
                wait = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (slot.consecutive_429 - 1))
            # Deadlines only extend: a second, shorter 429 never brings a key back early.
            slot.cooling_until = max(slot.cooling_until, now + wait)
        elif status_code in (401, 403) and slot.state == ACTIVE:
            self.disable(slot, f"{status_code} {message or ''}".strip()[:120])

    def _limits(self, slot: KeySlot, headers: dict[str, str], now: float) -> None:
        for kind in ("requests", "tokens"):
            raw = headers.get(f"x-ratelimit-remaining-{kind}")
            if raw is None:
                continue
            try:
                value = int(float(raw))
            except ValueError:
                continue
            if kind == "requests":
                slot.remaining_requests = value
            else:
                slot.remaining_tokens = value
            reset = parse_reset(headers.get(f"x-ratelimit-reset-{kind}"))
            if reset is not None:
                slot.limit_reset_at = now + reset

    # -- operations -------------------------------------------------------------------------
    def find(self, fp: str) -> KeySlot | None:
        """By fingerprint, or by a unique prefix of it / its last-4 part."""
        exact = [s for s in self.slots if s.fingerprint == fp]
        if exact:
            return exact[0]
        partial = [s for s in self.slots if fp and (s.fingerprint.startswith(fp)
                                                    or fp in s.fingerprint)]
        return partial[0] if len(partial) == 1 else None

    def by_secret(self, secret: str) -> KeySlot | None:
        return next((s for s in self.slots if s.secret == secret), None)

    def add(self, slot: KeySlot) -> None:
        self.slots.append(slot)

    def retire(self, slot: KeySlot) -> None:
        slot.state = RETIRED

    def disable(self, slot: KeySlot, reason: str) -> None:
        slot.state = DISABLED
        slot.reason = reason

    def enable(self, slot: KeySlot) -> None:
        slot.state = ACTIVE
        slot.reason = None
        slot.cooling_until = 0.0
        slot.consecutive_429 = 0
