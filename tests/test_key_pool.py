"""The key pool: strategies, cooldowns that only extend, disable / enable, reset parsing."""

from __future__ import annotations

import pytest

from swarm_tui.gateway.keypool import (
    ACTIVE,
    COOLING,
    DISABLED,
    RETIRED,
    KeyPool,
    KeySlot,
    parse_reset,
)


def pool(n: int = 3, strategy: str = "least-in-flight") -> KeyPool:
    p = KeyPool(strategy)  # type: ignore[arg-type]
    for i in range(n):
        p.add(KeySlot(f"sk-test-key-number-{i}-abcdefgh", f"k{i}", client=None))  # type: ignore[arg-type]
    return p


def r429(p: KeyPool, slot: KeySlot, retry_after: float | None, now: float) -> None:
    p.begin(slot)
    p.end(slot, error_class="rate_limited", status_code=429, message="slow down",
          retry_after_s=retry_after, headers=None, now=now)


def test_cooldown_deadline_only_extends():
    p = pool(1)
    k = p.slots[0]
    r429(p, k, 10.0, now=100.0)
    assert k.cooling_until == 110.0
    r429(p, k, 1.0, now=101.0)  # a second, shorter Retry-After never shortens it
    assert k.cooling_until == 110.0
    r429(p, k, 20.0, now=102.0)
    assert k.cooling_until == 122.0
    assert k.status(121.9) == COOLING and k.status(122.0) == ACTIVE  # back by itself
    assert k.rate_limited == 3 and k.errors == 3


def test_429_without_retry_after_backs_off_per_key():
    p = pool(1)
    k = p.slots[0]
    for n, expected in enumerate((1.0, 2.0, 4.0, 8.0)):
        r429(p, k, None, now=1000.0 + n * 100)
        assert k.cooling_until == 1000.0 + n * 100 + expected
    p.begin(k)
    p.end(k, error_class=None, status_code=None, message=None, retry_after_s=None,
          headers=None, now=2000.0)
    assert k.consecutive_429 == 0


def test_cooling_keys_are_skipped_and_dispatch_learns_when_to_retry():
    p = pool(2)
    a, b = p.slots
    r429(p, a, 5.0, now=10.0)
    assert p.pick(now=11.0) is b
    r429(p, b, 2.0, now=11.0)
    assert p.pick(now=12.0) is None
    assert p.next_ready_in(now=12.0) == pytest.approx(1.0)  # b at 13.0
    assert p.pick(now=13.0) is b


def test_401_disables_with_its_reason_and_enable_brings_it_back():
    p = pool(2)
    a, b = p.slots
    p.begin(a)
    p.end(a, error_class="auth", status_code=401, message="Incorrect API key provided.",
          retry_after_s=None, headers=None, now=1.0)
    assert a.status() == DISABLED and a.reason == "401 Incorrect API key provided."
    assert [p.pick(now=2.0) for _ in range(3)] == [b, b, b]
    p.retire(b)
    assert p.pick(now=2.0) is None and p.next_ready_in(now=2.0) is None  # nothing comes back
    p.enable(a)
    assert p.pick(now=2.0) is a and b.status() == RETIRED


def test_least_in_flight_and_round_robin():
    p = pool(3)
    a, b, c = p.slots
    a.in_flight, b.in_flight, c.in_flight = 2, 0, 1
    assert p.pick(now=0) is b
    rr = pool(3, "round-robin")
    picks = [rr.pick(now=0) for _ in range(6)]
    assert picks[:3] != picks[0:1] * 3 and picks[:3] == picks[3:]
    assert set(picks) == set(rr.slots)


def test_proactive_prefers_headroom_and_waits_instead_of_a_429():
    p = pool(3, "proactive")
    a, b, c = p.slots
    for slot, remaining in ((a, 5), (b, 50), (c, 0)):
        p.begin(slot)
        p.end(slot, error_class=None, status_code=None, message=None, retry_after_s=None,
              headers={"x-ratelimit-remaining-requests": str(remaining),
                       "x-ratelimit-reset-requests": "30s"}, now=100.0)
    assert p.pick(now=101.0) is b
    b.in_flight = 48  # 2 left on b, 5 on a
    assert p.pick(now=101.0) is a
    a.in_flight = 5
    b.in_flight = 50
    assert p.pick(now=101.0) is None            # every key at its limit: no 429 on purpose
    assert p.next_ready_in(now=101.0) == pytest.approx(29.0)
    assert p.pick(now=130.0) is not None        # windows refilled


@pytest.mark.parametrize(("raw", "seconds"), [
    ("1s", 1.0), ("6m0s", 360.0), ("250ms", 0.25), ("1h2m3s", 3723.0), ("0.5", 0.5),
    ("12.5s", 12.5), ("", None), ("soon", None),
])
def test_parse_reset(raw, seconds):
    assert parse_reset(raw) == seconds


def test_find_by_fingerprint_or_unique_part():
    p = pool(3)
    a = p.slots[0]
    assert p.find(a.fingerprint) is a
    assert p.find(a.fingerprint.split("#")[1]) is a
    assert p.find("sk-") is None  # ambiguous
