"""The key pool: per key-model pacing, storms vs lone 429s, strategies, disable / enable."""

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


def r429(p: KeyPool, slot: KeySlot, retry_after: float | None, now: float,
         model: str = "m", sent: float | None = None, headers=None) -> str | None:
    p.begin(slot, model, now=now if sent is None else sent)
    return p.end(slot, error_class="rate_limited", status_code=429, message="slow down",
                 retry_after_s=retry_after, headers=headers, now=now, model=model,
                 sent_at=now if sent is None else sent)


def ok(p: KeyPool, slot: KeySlot, now: float, model: str = "m", headers=None,
       tokens: float = 0.0) -> None:
    p.begin(slot, model, now=now, tokens=tokens)
    p.end(slot, error_class=None, status_code=None, message=None, retry_after_s=None,
          headers=headers, now=now, model=model, sent_at=now)


def test_a_lone_429_slows_only_its_task_not_the_key_model():
    p = pool(1)
    k = p.slots[0]
    for i in range(30):
        ok(p, k, now=10.0 + i * 0.01)
    assert r429(p, k, 1.0, now=11.0) is None
    assert k.cooling_until == 0.0 and p.pick("m", now=11.0) is k
    assert k.rate_limited == 1 and k.status(11.0) == ACTIVE


def test_a_storm_cools_that_model_only_and_honours_retry_after():
    p = pool(1)
    k = p.slots[0]
    notes = [r429(p, k, 5.0, now=100.0 + i * 0.01) for i in range(3)]
    assert notes[:2] == [None, None] and "cooling 5.0 s" in (notes[2] or "")
    assert k.status(101.0) == COOLING and k.cooling_models(101.0) == ["m"]
    assert p.pick("m", now=101.0) is None
    assert p.next_ready_in("m", now=101.0) == pytest.approx(4.02)
    assert p.pick("other-model", now=101.0) is k  # another model on the same key goes on
    assert p.pick("m", now=105.03) is k           # back by itself, paced
    assert k.status(105.03) == ACTIVE


def test_simultaneous_429s_are_one_cooldown_step_and_every_cooldown_is_capped():
    p = pool(1)
    k = p.slots[0]
    st = k.rate("m")
    for _ in range(10):  # ten calls sent together, all answered 429 without Retry-After
        r429(p, k, None, now=0.5, sent=0.0)
    assert st.steps == 1 and k.cooling_until == pytest.approx(0.5 + 1.0)
    for _ in range(10):  # sent after that cooldown began: the next step
        r429(p, k, None, now=2.5, sent=2.0)
    assert st.steps == 2 and k.cooling_until == pytest.approx(2.5 + 2.0)
    for i in range(3):
        r429(p, k, 3600.0, now=10.0 + i / 100)
    assert k.cooling_until <= 10.02 + p.retry_after_cap_s


def test_a_learned_quota_paces_to_the_next_free_slot_not_a_full_refill():
    p = pool(1)
    k = p.slots[0]
    # a continuously refilling bucket of 60/min with 2 left: one call back every second
    ok(p, k, now=100.0, headers={"x-ratelimit-limit-requests": "60",
                                  "x-ratelimit-remaining-requests": "2",
                                  "x-ratelimit-reset-requests": "58s"})
    assert p.pick("m", now=100.0) is k
    p.begin(k, "m", now=100.0)
    assert p.pick("m", now=100.0) is k
    p.begin(k, "m", now=100.0)
    assert p.pick("m", now=100.0) is None
    assert p.next_ready_in("m", now=100.0) == pytest.approx(1.0)  # not 58 s
    assert p.pick("m", now=101.0) is k


def test_workers_sharing_a_key_spend_their_share_of_what_remains():
    """Two workers' pools learn the same answer (the gateway counts both): 40 remain. At a
    share of 1/2 each sends 20 before it waits — together the 40 — not 40 each."""
    headers = {"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "40",
               "x-ratelimit-reset-requests": "4s"}

    def sends_before_waiting(share: float) -> int:
        p = pool(1)
        p.set_share(share)
        k = p.slots[0]
        ok(p, k, now=50.0, headers=headers)
        n = 0
        while p.pick("m", now=50.0) is k and n < 1000:
            p.begin(k, "m", now=50.0)
            n += 1
        return n

    assert sends_before_waiting(1.0) == 40
    assert sends_before_waiting(0.5) == 20
    assert sends_before_waiting(1 / 3) == 13


def test_a_quota_429_waits_for_the_gateways_refill():
    p = pool(1)
    k = p.slots[0]
    note = r429(p, k, 0.5, now=10.0, headers={"x-ratelimit-limit-requests": "120",
                                              "x-ratelimit-remaining-requests": "0",
                                              "x-ratelimit-reset-requests": "60s"})
    assert note is not None and "quota spent" in note
    assert p.pick("m", now=10.1) is None
    assert p.next_ready_in("m", now=10.0) == pytest.approx(0.5)  # 120/min: every 0.5 s


def test_401_disables_with_its_reason_and_enable_brings_it_back():
    p = pool(2)
    a, b = p.slots
    p.begin(a, "m", now=1.0)
    p.end(a, error_class="auth", status_code=401, message="Incorrect API key provided.",
          retry_after_s=None, headers=None, now=1.0, model="m")
    assert a.status() == DISABLED and a.reason == "401 Incorrect API key provided."
    assert [p.pick("m", now=2.0) for _ in range(3)] == [b, b, b]
    p.retire(b)
    assert p.pick("m", now=2.0) is None and p.next_ready_in("m", now=2.0) is None
    p.enable(a)
    assert p.pick("m", now=2.0) is a and b.status() == RETIRED


def test_least_in_flight_and_round_robin():
    p = pool(3)
    a, b, c = p.slots
    a.in_flight, b.in_flight, c.in_flight = 2, 0, 1
    assert p.pick("m", now=0) is b
    rr = pool(3, "round-robin")
    picks = [rr.pick("m", now=0) for _ in range(6)]
    assert picks[:3] != picks[0:1] * 3 and picks[:3] == picks[3:]
    assert set(picks) == set(rr.slots)


def test_proactive_prefers_headroom():
    p = pool(3, "proactive")
    a, b, c = p.slots
    for slot, remaining in ((a, 5), (b, 50), (c, 0)):
        ok(p, slot, now=100.0, headers={"x-ratelimit-limit-requests": "100",
                                        "x-ratelimit-remaining-requests": str(remaining),
                                        "x-ratelimit-reset-requests": "30s"})
    assert p.pick("m", now=100.0) is b
    assert p.pick("m", now=100.0) is b
    c_wait = c.rate("m").ready_in(100.0)
    assert c_wait > 0  # c has nothing left: no 429 on purpose


@pytest.mark.parametrize(("raw", "seconds"), [
    ("1s", 1.0), ("6m0s", 360.0), ("250ms", 0.25), ("1h2m3s", 3723.0), ("0.5", 0.5),
    ("12.5s", 12.5), ("", None), ("soon", None), ("nan", None), ("inf", None), ("-3", None),
])
def test_parse_reset(raw, seconds):
    assert parse_reset(raw) == seconds


def test_find_by_fingerprint_or_unique_part():
    p = pool(3)
    a = p.slots[0]
    assert p.find(a.fingerprint) is a
    assert p.find(a.fingerprint.split("#")[1]) is a
    assert p.find("sk-") is None  # ambiguous


@pytest.mark.parametrize(("limit", "remaining"), [("nan", "5"), ("60", "nan"), ("inf", "5"),
                                                  ("60", "inf")])
def test_rate_headers_that_are_no_numbers_teach_nothing(limit, remaining):
    """A proxy's `nan` made every wait nan (a key that never cools, or never comes back)
    and `inf` every bucket endless: such headers are not learned from."""
    import math

    p = pool(1)
    k = p.slots[0]
    ok(p, k, now=100.0, headers={"x-ratelimit-limit-requests": limit,
                                  "x-ratelimit-remaining-requests": remaining,
                                  "x-ratelimit-reset-requests": "1s"})
    state = k.rate("m")
    assert not state.learned and state.rate is None
    assert math.isfinite(state.level) and p.pick("m", now=100.0) is k


def test_retry_after_that_is_no_number_is_no_wait():
    from swarm_tui.gateway.errors import retry_after_seconds

    assert retry_after_seconds({"retry-after": "nan"}) is None  # was 0: a retry at once
    assert retry_after_seconds({"retry-after-ms": "nan", "retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after": "-5"}) == 0.0
    assert retry_after_seconds({"retry-after": "inf"}) == float("inf")  # capped by policy


QUOTA_OUT = {"x-ratelimit-limit-requests": "6000", "x-ratelimit-remaining-requests": "0",
             "x-ratelimit-reset-requests": "8s"}


@pytest.mark.parametrize("late_s", [0.0, 0.05, 0.3])
def test_a_quota_429_read_late_still_cools_the_key_model(late_s):
    """A refusal saying nothing remains cools the key-model however long its answer took
    to be read: on a loaded core the loop reads a 429 tens to hundreds of ms after the
    send, and 6,000/min refills 5-30 calls in that time — credited, the quota looked open
    and every later call drew a 429 too (~250 on one demo key)."""
    p = pool(1)
    k = p.slots[0]
    note = r429(p, k, 8.0, now=10.0 + late_s, sent=10.0, headers=QUOTA_OUT)
    assert note is not None and "quota spent" in note
    assert p.pick("m", now=10.5 + late_s) is None
    assert p.next_ready_in("m", now=10.0 + late_s) == pytest.approx(8.0)


def test_a_late_quota_429_without_retry_after_waits_one_refill_from_its_reading():
    """Without Retry-After the wait is the refill of one call from when the refusal was
    read (0.1 s at 600/min), not from when the refused call was sent."""
    p = pool(1)
    k = p.slots[0]
    headers = dict(QUOTA_OUT, **{"x-ratelimit-limit-requests": "600"})
    note = r429(p, k, None, now=20.5, sent=20.0, headers=headers)
    assert note is not None and "quota spent" in note
    assert p.pick("m", now=20.55) is None
    assert p.next_ready_in("m", now=20.5) == pytest.approx(0.1)


def test_an_answer_read_after_a_refusal_does_not_reopen_the_quota():
    """An answer to a call sent before the refusal was read, arriving after it, may say
    what remained before the refusal: it does not reopen the bucket (the next answer after
    the wait will say what remains)."""
    p = pool(1)
    k = p.slots[0]
    spent = dict(QUOTA_OUT, **{"x-ratelimit-limit-requests": "600"})  # one call per 0.1 s
    p.begin(k, "m", now=30.15)  # sent while the refused call's answer was on its way
    assert r429(p, k, None, now=30.2, sent=30.1, headers=spent) is not None
    p.end(k, error_class=None, status_code=None, message=None, retry_after_s=None,
          headers=dict(spent, **{"x-ratelimit-remaining-requests": "40"}), now=30.21,
          model="m", sent_at=30.15)
    assert p.pick("m", now=30.22) is None
    assert p.pick("m", now=30.31) is k  # one call's refill after the refusal was read


def tpm(remaining: int, limit: int = 60_000, reset: str = "1s") -> dict[str, str]:
    """A tokens-per-minute quota's headers alone (llmock's with only --tpm)."""
    return {"x-ratelimit-limit-tokens": str(limit),
            "x-ratelimit-remaining-tokens": str(remaining),
            "x-ratelimit-reset-tokens": reset}


def sent_before_waiting(p: KeyPool, k: KeySlot, now: float, tokens: float) -> int:
    """How many calls of `tokens` the key takes at `now` before it must wait."""
    sent = 0
    while p.pick("m", now=now) is k and sent < 10:
        p.begin(k, "m", now=now, tokens=tokens)
        sent += 1
    return sent


def test_a_tokens_quota_paces_calls_by_what_each_is_charged():
    """60,000 tokens/min = 1,000 a second; 1,500 remain: two calls of 600 go, the third
    waits for the 300 tokens it lacks (0.3 s); the key-model's calls stay unpaced."""
    p = pool(1)
    k = p.slots[0]
    ok(p, k, now=0.0, headers=tpm(1_500, reset="2s"), tokens=600)
    assert sent_before_waiting(p, k, now=0.0, tokens=600) == 2
    assert k.rate("m").rate is None  # no request quota learned
    assert p.next_ready_in("m", now=0.0) == pytest.approx(0.3)
    assert p.pick("m", now=0.29) is None and p.pick("m", now=0.31) is k


def test_each_call_waits_for_its_own_size_not_the_last_ones():
    """Prompts differ: 1,000 tokens/s refill, 1,200 left after a 4,000-token call went. A
    300-token call fits now (the last call's size would have held it 2.8 s); a 2,000-token
    one does not, and the parked tasks are woken when that one fits (0.8 s)."""
    p = pool(1)
    k = p.slots[0]
    ok(p, k, now=0.0, headers=tpm(5_200, reset="2s"), tokens=600)
    assert p.pick("m", now=0.0, tokens=4_000) is k
    p.begin(k, "m", now=0.0, tokens=4_000)  # 1,200 left
    assert p.pick("m", now=0.0, tokens=2_000) is None
    assert p.next_ready_in("m", now=0.0) == pytest.approx(0.8)
    assert p.pick("m", now=0.0, tokens=300) is k
    p.begin(k, "m", now=0.0, tokens=300)  # 900 left
    assert p.pick("m", now=1.05, tokens=2_000) is None  # 1,950 by then
    assert p.pick("m", now=1.11, tokens=2_000) is k


def test_a_tokens_429_cools_the_key_model_and_charges_later_calls_more():
    """A refusal the bucket did not foresee (it thought 600 tokens fitted): the gateway
    counts more than our estimate — later calls are charged 25 % more, and the key-model
    waits for that much."""
    p = pool(1)
    k = p.slots[0]
    ok(p, k, now=0.0, headers=tpm(5_000), tokens=600)
    p.begin(k, "m", now=1.0, tokens=600)
    note = p.end(k, error_class="rate_limited", status_code=429, message="tokens",
                 retry_after_s=None, headers=tpm(300), now=1.0, model="m", sent_at=1.0)
    assert note is not None and note.startswith("token quota spent: next call in")
    assert "60,000 tokens/min" in note
    q = k.rate("m").tokens
    assert q is not None and q.scale == pytest.approx(1.25)
    # 750 needed (600 x 1.25), 300 there, 1,000/s: 0.45 s
    assert p.next_ready_in("m", now=1.0) == pytest.approx(0.45)
    assert p.pick("m", now=1.4) is None and p.pick("m", now=1.46) is k


def test_refusals_of_calls_sent_together_raise_the_charge_once():
    """Ten calls sent at once, all refused: one event, one 25 % step — not 1.25^10 (the
    cap, 8x: a key then paced at an eighth of its quota). A call sent after the step and
    refused again is new evidence: one more step."""
    p = pool(1)
    k = p.slots[0]
    ok(p, k, now=0.0, headers=tpm(50_000), tokens=600)
    for i in range(10):
        p.begin(k, "m", now=1.0 + i / 1000, tokens=600)
    for i in range(10):
        p.end(k, error_class="rate_limited", status_code=429, message="tokens",
              retry_after_s=None, headers=tpm(100), now=1.02 + i / 1000, model="m",
              sent_at=1.0 + i / 1000)
    q = k.rate("m").tokens
    assert q is not None and q.scale == pytest.approx(1.25)
    assert q.need == pytest.approx(600 * 1.25)
    p.begin(k, "m", now=3.0, tokens=600)
    p.end(k, error_class="rate_limited", status_code=429, message="tokens",
          retry_after_s=None, headers=tpm(100), now=3.01, model="m", sent_at=3.0)
    assert q.scale == pytest.approx(1.25 ** 2)


def test_answers_while_the_tokens_quota_binds_bring_the_charge_back_down():
    """Over-charging wastes the quota: each answer admitted while the bucket holds less
    than two calls' worth lowers the charge by 1 % (never below a quarter of the estimate)."""
    p = pool(1)
    k = p.slots[0]
    scales = []
    for i in range(300):  # the gateway always has a call and a half's worth left
        p.begin(k, "m", now=float(i), tokens=600)
        q = k.rate("m").tokens
        left = int(1.5 * (q.need if q is not None else 600))
        p.end(k, error_class=None, status_code=None, message=None, retry_after_s=None,
              headers=tpm(left), now=float(i), model="m", sent_at=float(i))
        scales.append(k.rate("m").tokens.scale)
    # (the first answer teaches the quota; the charges come with the calls after it)
    assert scales[1] == pytest.approx(0.99) and scales[-1] == pytest.approx(0.25)
    full = pool(1)
    f = full.slots[0]
    for i in range(10):  # a bucket far from empty teaches nothing about the charge
        ok(full, f, now=float(i), headers=tpm(50_000), tokens=600)
    assert f.rate("m").tokens.scale == 1.0


def test_a_workers_share_of_a_tokens_quota():
    """Two workers on one key: each counts half of what the headers say remains."""
    p = pool(1)
    p.set_share(0.5)
    k = p.slots[0]
    ok(p, k, now=0.0, headers=tpm(2_400, reset="3s"), tokens=600)
    assert sent_before_waiting(p, k, now=0.0, tokens=600) == 2  # 1,200 of the 2,400


class QuotaGateway:
    """A gateway's tokens-per-minute count, as llmock keeps it: one bucket per key
    (`per_key`, a LiteLLM virtual key's limit) or one per key and model (OpenAI's)."""

    def __init__(self, per_key: bool, limit: int = 60_000, counts: float = 1.0) -> None:
        self.per_key, self.limit, self.rate = per_key, limit, limit / 60
        self.counts = counts  # its tokens per token of our estimate (llmock's: ~1.13)
        self.levels: dict[str, float] = {}
        self.at: dict[str, float] = {}

    def admit(self, model: str, tokens: float, now: float) -> tuple[bool, dict[str, str]]:
        b = "*" if self.per_key else model
        level = min(self.limit, self.levels.get(b, self.limit)
                    + (now - self.at.get(b, now)) * self.rate)
        tokens *= self.counts
        admitted = level >= tokens
        self.levels[b], self.at[b] = level - (tokens if admitted else 0), now
        left = self.levels[b]
        return admitted, tpm(int(left), self.limit, f"{(self.limit - left) / self.rate:.3f}s")


def two_models(p: KeyPool, k: KeySlot, gw: QuotaGateway, rounds: int) -> list[str]:
    """The team's routing on one key: a short prompt to one model, a long one to the
    other, in turn, each answered before the next goes; the pool's log lines."""
    notes = []
    for i in range(rounds):
        model, tokens = ("short", 600.0) if i % 2 else ("long", 3_000.0)
        now = i * 0.01
        p.begin(k, model, now=now, tokens=tokens)
        admitted, headers = gw.admit(model, tokens, now)
        note = p.end(k, error_class=None if admitted else "rate_limited",
                     status_code=None if admitted else 429, message=None,
                     retry_after_s=None, headers=headers, now=now, model=model, sent_at=now)
        if note:
            notes.append(note)
    return notes


@pytest.mark.parametrize("counts", [1.0, 1.13])
def test_one_quota_across_a_keys_models_is_learned_from_its_counts(counts):
    """The gateway's count falls, beyond a model's own calls, by what the key's other
    model sent: after two such answers the key's models are paced by one state — a
    call on one is taken off what the other may send."""
    p = pool(1)
    k = p.slots[0]
    notes = two_models(p, k, QuotaGateway(per_key=True, counts=counts), rounds=8)
    assert k.one_quota
    assert any("one quota for the key's models (long, short)" in n for n in notes), notes
    assert k.rate("short") is k.rate("long")
    q = k.rate("short").tokens
    assert q is not None
    q.refill(0.08)
    before = q.level
    p.begin(k, "long", now=0.08, tokens=3_000)
    assert k.rate("short").tokens.level == pytest.approx(before - 3_000, abs=1.0)


@pytest.mark.parametrize("counts", [1.0, 1.13, 0.8, 1.5])
def test_separate_quotas_per_model_stay_separate(counts):
    """OpenAI's limits are per model: the same traffic never joins them — also when the
    gateway counts a prompt otherwise than our estimate (the gap that leaves is our own
    calls' size, not the other model's)."""
    p = pool(1)
    k = p.slots[0]
    notes = two_models(p, k, QuotaGateway(per_key=False, counts=counts), rounds=60)
    assert not any("one quota" in n for n in notes), notes
    assert not k.one_quota and k.rate("short") is not k.rate("long")


@pytest.mark.parametrize(("scope", "joined"), [("key", True), ("model", False)])
def test_a_configured_quota_scope_is_not_second_guessed(scope, joined):
    p = KeyPool(quota_scope=scope)
    p.add(KeySlot("sk-test-key-number-0-abcdefgh", "k0", client=None))  # type: ignore[arg-type]
    k = p.slots[0]
    two_models(p, k, QuotaGateway(per_key=True), rounds=40)
    assert k.one_quota is joined
    assert (k.rate("short") is k.rate("long")) is joined



def swarm_start(scope: str, per_key: bool, seconds: float = 1.0, counts: float = 1.0,
                latency: float = 0.05) -> tuple[int, int]:
    """The start of the team's swarm on one key: 100 in flight, one task in four long (to
    `long`), the rest short (to `short`), every answer `latency` s after its send, the gateway
    counting per key or per key and model (60,000 tokens/min, a full bucket; `counts`
    of its tokens per token of our estimate). Returns
    (calls sent, 429s) over `seconds`."""
    p = KeyPool(quota_scope=scope)  # type: ignore[arg-type]
    p.add(KeySlot("sk-test-key-number-0-abcdefgh", "k0", client=None))  # type: ignore[arg-type]
    k = p.slots[0]
    gw = QuotaGateway(per_key=per_key, counts=counts)
    out: list[tuple[float, float, str, float, bool, dict[str, str]]] = []  # answers due
    sent = refused = i = 0
    for step in range(int(seconds / 0.005)):
        now = step * 0.005
        for due in [a for a in out if a[0] <= now]:
            out.remove(due)
            _, at, model, _tokens, admitted, headers = due
            p.end(k, error_class=None if admitted else "rate_limited",
                  status_code=None if admitted else 429, message=None, retry_after_s=None,
                  headers=headers, now=now, model=model, sent_at=at)
        while len(out) < 100:
            model, tokens = ("long", 3_000.0) if i % 4 == 0 else ("short", 600.0)
            at = now + i * 1e-6  # one after another, as a loop sends them
            if p.pick(model, now=at, tokens=tokens) is None:
                break
            p.begin(k, model, now=at, tokens=tokens)
            admitted, headers = gw.admit(model, tokens, at)
            out.append((now + latency, at, model, tokens, admitted, headers))
            sent, refused, i = sent + 1, refused + (not admitted), i + 1
    return sent, refused


@pytest.mark.parametrize("counts", [1.0, 1.13])
def test_a_key_wide_quota_is_not_spent_twice_by_the_first_burst(counts):
    """Each model's first answer said the bucket was full; both burst on it before any
    answer could show they share it (seen on llmock: 45 of the first 100 calls refused).
    In `auto` a model whose key has another model sending waits, one call at a time, for
    the answer that tells — a few round trips — and then goes."""
    _, told = swarm_start("key", per_key=True, counts=counts)
    _, per_model = swarm_start("model", per_key=True, counts=counts)
    _, learned = swarm_start("auto", per_key=True, counts=counts)
    assert per_model >= 20  # the double spend this is about
    assert learned <= told + 5, (learned, told, per_model)


@pytest.mark.parametrize("latency", [0.05, 0.3])
@pytest.mark.parametrize("counts", [0.8, 1.0, 1.13, 1.5])
def test_separate_quotas_lose_only_a_few_round_trips_to_the_question(counts, latency):
    """On a gateway with a quota per model (OpenAI's) the wait costs a few round trips of
    one model's start, not its pace: by 4 s as many calls as told (and no 429)."""
    told, _ = swarm_start("model", per_key=False, seconds=4.0, counts=counts, latency=latency)
    learned, refused = swarm_start("auto", per_key=False, seconds=4.0, counts=counts,
                                   latency=latency)
    assert refused == 0
    assert learned >= 0.95 * told, (learned, told)


def test_a_gateway_that_states_no_quota_never_makes_a_model_wait():
    """No x-ratelimit-* in the answers: there is no quota whose scope to ask about, and the
    two models' calls go at once (the wait once held the simulator's demo 2 s)."""
    p = KeyPool(quota_scope="auto")
    p.add(KeySlot("sk-test-key-number-0-abcdefgh", "k0", client=None))  # type: ignore[arg-type]
    k = p.slots[0]
    for model in ("long", "short"):
        p.begin(k, model, now=0.0, tokens=600)
    for model in ("long", "short"):
        p.end(k, error_class=None, status_code=None, message=None, retry_after_s=None,
              headers={}, now=0.05, model=model, sent_at=0.0)
    for i in range(20):
        model = "long" if i % 2 else "short"
        assert p.pick(model, now=0.05, tokens=600) is k, i
        p.begin(k, model, now=0.05, tokens=600)


def refill_phase(counts: float, seconds: float = 60.0, latency: float = 0.02) -> tuple[int, int]:
    """One key, one model, 40 tasks always waiting, on a gateway counting `counts` of its
    tokens per token of our estimate (30,000 tokens/min): its bucket spent by the first
    burst, then each call waits for the refill (~1.2 s of it at 600 tokens). A refused
    call is sent again as soon as the key may take it (a retry: the engine's wait is the
    key's). Returns (calls sent, 429s) after the first burst's answers."""
    p = pool(1)
    k = p.slots[0]
    gw = QuotaGateway(per_key=True, limit=30_000, counts=counts)
    out: list[tuple[float, float, bool, dict[str, str]]] = []
    sent = refused = 0
    for step in range(int(seconds / 0.005)):
        now = step * 0.005
        for due in [a for a in out if a[0] <= now]:
            out.remove(due)
            _, at, admitted, headers = due
            p.end(k, error_class=None if admitted else "rate_limited",
                  status_code=None if admitted else 429, message=None, retry_after_s=None,
                  headers=headers, now=now, model="m", sent_at=at)
        while len(out) < 40 and p.pick("m", now=now, tokens=600.0) is k:
            p.begin(k, "m", now=now, tokens=600.0)
            admitted, headers = gw.admit("m", 600.0, now)
            out.append((now + latency, now, admitted, headers))
            if now > 2.0:  # past the first burst and its answers
                sent, refused = sent + 1, refused + (not admitted)
    return sent, refused


@pytest.mark.parametrize("counts", [1.0, 1.08, 1.13, 1.3])
def test_a_binding_tokens_quota_is_not_probed_by_refusals(counts):
    """While the refill binds, each call goes when the gateway will take it. A refusal
    whose headers still showed a call's worth by our count (the gateway counts more) once
    lowered the charge as an admitted call does: the next went out early again, and one
    key on llmock drew a 429 a few ms before each admitted call (12 of 45)."""
    sent, refused = refill_phase(counts)
    assert sent >= 0.9 * (58 * 500 / (600 * counts)), sent  # paced at the refill, not below
    # none here; before, 97 % of the calls at 1.08 and 1.13 were refused
    assert refused <= 0.05 * sent, (refused, sent)
