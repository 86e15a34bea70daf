"""A gateway's API keys: which one takes the next call, and each key's health.

States: active, cooling (some model of the key is paced to a stop, derived),
disabled (401/403, with the reason), retired (no new calls; calls in flight
finish). Rate limits are kept per key *and* model (gateway/ratestate.py): one
model's 429s never hold another model's calls — unless the gateway's counts show one
quota for all the key's models (or `quota_scope = "key"` says so).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from swarm_tui.core.states import KeyState
from swarm_tui.gateway.errors import ErrorClass
from swarm_tui.gateway.keys import fingerprint
from swarm_tui.gateway.ratestate import PROBE_POLL_S, RateState, parse_reset

if TYPE_CHECKING:
    import openai

Strategy = Literal["least-in-flight", "round-robin", "proactive"]
QuotaScope = Literal["auto", "model", "key"]
ACTIVE, COOLING, DISABLED, RETIRED = tuple(KeyState)
ALL_MODELS = "*"  # the rate state of a key whose quota covers all its models
DEFAULT_RETRY_AFTER_CAP_S = 30.0
SCOPE_LOOKS = 3  # answers read against the others' sends before a model stops waiting
SCOPE_HOLD_S = 2.0  # … or this long one call at a time, whichever comes first
__all__ = ["ACTIVE", "COOLING", "DISABLED", "RETIRED", "KeyPool", "KeySlot", "parse_reset"]


@dataclass(eq=False, slots=True)
class KeySlot:
    """A key, its fingerprint, the client built for it, and its health. The key never
    leaves memory: repr, stores and screens see the fingerprint only."""

    secret: str = field(repr=False)
    label: str | None
    client: openai.AsyncOpenAI | None = field(repr=False)  # built on first SDK call
    source: str = "config"          # env:NAME | file | added
    fingerprint: str = ""
    state: str = ACTIVE             # active | disabled | retired (cooling is derived)
    reason: str | None = None       # why disabled
    in_flight: int = 0
    calls: int = 0
    rate_limited: int = 0
    errors: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    last_used: float | None = None  # unix seconds
    models: dict[str, RateState] = field(default_factory=dict)
    share: float = 1.0              # of the key's quota, when processes share it (workers)
    # one quota for all of the key's models (LiteLLM's virtual-key tpm/rpm limits, llmock):
    # learned from a refusal no per-model bucket foresaw (KeyPool.end); then every model
    # of the key is paced by one state, `models[ALL_MODELS]`
    one_quota: bool = False
    shared_signs: int = 0           # answers whose count agreed with one key-wide quota
    learns_scope: bool = True       # quota_scope = "auto" (else as configured)
    # auto: answers each model's count was read against the others' sends (the question
    # is settled for it after SCOPE_LOOKS, or at once when one says "separate")
    scope_looks: dict[str, int] = field(default_factory=dict)
    scope_since: dict[str, float] = field(default_factory=dict)  # first held (monotonic)

    def __post_init__(self) -> None:
        self.fingerprint = fingerprint(self.secret)

    def rate(self, model: str) -> RateState:
        if self.one_quota:
            model = ALL_MODELS
        st = self.models.get(model)
        if st is None:
            st = self.models[model] = RateState(share=self.share)
        return st

    def ready_in(self, model: str, now: float, tokens: float = 0.0) -> float:
        """Seconds until this key may take a call on `model` (0: now)."""
        st = self.rate(model)
        wait = st.ready_in(now, tokens)
        if st.in_flight and self.scope_open(model, st, now):
            return max(wait, PROBE_POLL_S)
        return wait

    def scope_open(self, model: str, st: RateState, now: float) -> bool:
        """auto: has `model` learned its quota while another of the key's models is
        sending, and no answer yet said whether they share it? Each model's first answer
        reads a full bucket; both then burst on it — on a key-wide quota (llmock) 45 of
        the first 100 calls were refused before any answer could show the quota shared.
        Until one does (SCOPE_LOOKS answers that could tell, SCOPE_HOLD_S at most) it
        sends one call at a time. A model alone on its key, or on a gateway that states no
        quota, never waits (the simulator's demo waited 2 s for an answer that never came)."""
        if (len(self.models) < 2 or not self.learns_scope or self.one_quota or st.probing
                or not (st.learned or st.tokens is not None)  # no quota said: none to share
                or self.scope_looks.get(model, 0) >= SCOPE_LOOKS):
            return False
        heard = st.heard_at()
        if not any(o.in_flight or o.sent_since(heard)
                   for m, o in self.models.items() if m != model):
            return False
        if now - self.scope_since.setdefault(model, now) > SCOPE_HOLD_S:
            self.scope_looks[model] = SCOPE_LOOKS  # asked long enough: go as its own
            return False
        return True

    @property
    def cooling_until(self) -> float:
        """The latest cooldown of any of its models (monotonic), for display."""
        return max((st.cooling_until for st in self.models.values()), default=0.0)

    def cooling_models(self, now: float) -> list[str]:
        return sorted("all models" if m == ALL_MODELS else m
                      for m, st in self.models.items() if st.cooling_until > now)

    def shared_quota_seen(self, model: str) -> str | None:
        """After `model`'s state learned from an answer's x-ratelimit-*: is the quota the
        key's rather than the model's? Then the gateway's count fell, beyond our own calls,
        by about what the key's other models sent meanwhile — twice (a mis-estimated charge
        leaves a gap too, but not one the size of the others' calls). From then on the
        key's models are paced by one state. The team's routing sends long prompts to one
        model and short ones to another over the same keys; two per-model buckets each
        spent a key-wide quota (llmock's, a LiteLLM virtual key's): ~17 % of calls 429.
        Returns the log's line when it joins them."""
        st = self.models.get(model)
        if self.one_quota or not self.learns_scope or st is None or st.gap is None:
            return None
        heard, sent_at, gap_calls, gap_tokens = st.gap
        st.gap = None
        others = [o for m, o in self.models.items() if m != model and o.sends]
        calls = sum(o.sent_since(heard) - o.sent_since(sent_at) for o in others)
        tokens = sum(o.tokens_between(heard, sent_at) for o in others)
        need = st.tokens.need if st.tokens is not None else 1.0
        telling = calls >= 2 or tokens >= need  # the others sent enough to show in the count
        if telling:
            self.scope_looks[model] = self.scope_looks.get(model, 0) + 1
        # what a charge mis-estimated by a quarter could explain on its own calls meanwhile
        # is not a sign (a long prompt's ~10 % error is the size of a short call's charge);
        # the answered call counts twice here, a margin for the one whose count we read
        scale = st.tokens.scale if st.tokens is not None else 1.0
        own = st.tokens_between(heard, sent_at) + st.charge_of(sent_at) * scale
        gap_tokens -= 0.25 * own
        agrees = ((calls >= 2 and 0.5 * calls <= gap_calls <= 2 * calls + 1)
                  or (tokens >= need and 0.5 * tokens <= gap_tokens <= 2 * tokens + need))
        if not agrees:
            if telling:  # the others' calls did not show: a quota of its own
                self.scope_looks[model] = SCOPE_LOOKS
            return None
        self.shared_signs += 1
        if self.shared_signs < 2:
            return None
        names = ", ".join(sorted(self.models))
        self.models[ALL_MODELS] = RateState.merged(
            st, [o for m, o in self.models.items() if m != model], self.share)
        self.one_quota = True
        return (f"one quota for the key's models ({names}): the gateway's count fell by "
                "what the others sent — paced together from now on")

    def status(self, now: float | None = None) -> str:
        if self.state != ACTIVE:
            return self.state
        now = time.monotonic() if now is None else now
        return COOLING if self.cooling_until > now else ACTIVE

    def usable(self, now: float) -> bool:
        """Not disabled or retired (a model of it may still be paced)."""
        return self.state == ACTIVE


class KeyPool:
    def __init__(self, strategy: Strategy = "least-in-flight",
                 retry_after_cap_s: float = DEFAULT_RETRY_AFTER_CAP_S,
                 quota_scope: QuotaScope = "auto") -> None:
        self.strategy = strategy
        self.quota_scope = quota_scope
        self.retry_after_cap_s = retry_after_cap_s
        self.slots: list[KeySlot] = []
        self._rr = 0
        self.share = 1.0

    # -- choosing ----------------------------------------------------------------------------
    def pick(self, model: str = "", now: float | None = None,
             tokens: float = 0.0) -> KeySlot | None:
        """The key for the next call on `model`, or None when every key must wait (its
        quota is spent, it is cooling, disabled or retired). Every strategy paces: the
        difference is only which of the keys ready now takes the call. `tokens`: the
        call's own charge against a tokens-per-minute quota — a short prompt after a long
        one goes when it fits, a long one after short ones waits for its own size."""
        now = time.monotonic() if now is None else now
        ready = [s for s in self.slots if s.usable(now) and s.ready_in(model, now, tokens) <= 0]
        if not ready:
            return None
        if self.strategy == "round-robin":
            self._rr += 1
            return ready[self._rr % len(ready)]
        if self.strategy == "proactive":
            return max(ready, key=lambda s: (s.rate(model).headroom(now), -s.in_flight,
                                             -s.calls))
        best = ready[0]
        for s in ready:
            if (s.in_flight, s.calls) < (best.in_flight, best.calls):
                best = s
        return best

    def next_ready_in(self, model: str = "", now: float | None = None) -> float | None:
        """Seconds until some key may take a call on `model`; None if none ever will by
        itself (every key disabled or retired)."""
        now = time.monotonic() if now is None else now
        waits = [s.ready_in(model, now) for s in self.slots if s.usable(now)]
        return min(waits) if waits else None

    def ready_count(self, model: str = "", now: float | None = None) -> int:
        """How many calls on `model` the keys could take right now (a bound, for waking
        just that many parked tasks)."""
        now = time.monotonic() if now is None else now
        n = 0.0
        for s in self.slots:
            if s.usable(now) and s.ready_in(model, now) <= 0:
                head = s.rate(model).headroom(now)
                n += 10_000 if head == float("inf") else max(1.0, head)
        return int(n)

    def stuck_for(self, model: str, now: float | None = None) -> float:
        """How long every usable key has answered this model only 429s (0: some key has
        not): past `rate_limit_max_wait_s` no key is recovering, and tasks give up."""
        now = time.monotonic() if now is None else now
        spans = []
        for s in self.slots:
            if s.usable(now):
                since = s.rate(model).failing_since
                spans.append(0.0 if since is None else now - since)
        return min(spans) if spans else 0.0

    def any_usable(self, model: str | None = None, now: float | None = None,
                   besides: str | None = None) -> bool:
        """Without choosing one (choosing moves round-robin on). `model`: ready for it now;
        `besides`: a key other than this fingerprint."""
        now = time.monotonic() if now is None else now
        return any(s.usable(now) and s.fingerprint != besides
                   and (model is None or s.ready_in(model, now) <= 0) for s in self.slots)

    # -- what calls report ------------------------------------------------------------------
    def begin(self, slot: KeySlot, model: str = "", now: float | None = None,
              tokens: float = 0.0) -> None:
        """A call goes out on `slot`; `tokens`: what a tokens-per-minute quota charges it."""
        now = time.monotonic() if now is None else now
        slot.in_flight += 1
        slot.calls += 1
        slot.last_used = time.time()
        slot.rate(model).take(now, tokens)

    def end(self, slot: KeySlot, *, error_class: str | None, status_code: int | None,
            message: str | None, retry_after_s: float | None, headers: dict[str, str] | None,
            tokens_in: int = 0, tokens_out: int = 0, now: float | None = None,
            model: str = "", sent_at: float | None = None) -> str | None:
        """Returns what changed for the key-model when it slowed down (for the log)."""
        now = time.monotonic() if now is None else now
        sent = now if sent_at is None else sent_at
        slot.in_flight -= 1
        st = slot.rate(model)
        if error_class == ErrorClass.CANCELLED:
            st.in_flight -= 1  # a call that never ran answers nothing: still probing
            return None
        if status_code == 429:
            slot.errors += 1
            slot.rate_limited += 1
            note = st.rate_limited_call(now, sent, retry_after_s, headers,
                                        self.retry_after_cap_s)
            joined = slot.shared_quota_seen(model) if headers else None
            if joined is not None:
                return joined if note is None else f"{joined}; {note}"
            return note
        st.done(now, sent, headers, ok=error_class is None)
        if error_class is None:
            slot.tokens_in += tokens_in
            slot.tokens_out += tokens_out
        else:
            slot.errors += 1
            if status_code in (401, 403) and slot.state == ACTIVE:
                self.disable(slot, f"{status_code} {message or ''}".strip()[:120])
        return slot.shared_quota_seen(model) if headers else None

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
        slot.share = self.share
        slot.one_quota = slot.one_quota or self.quota_scope == "key"
        slot.learns_scope = self.quota_scope == "auto"
        for st in slot.models.values():
            st.share = self.share
        self.slots.append(slot)

    def set_share(self, share: float) -> None:
        """This process's part of every key's quota (1 / the workers sharing the keys):
        learned quotas are counted at it from the next answer on."""
        if share == self.share:  # set every second by a worker's feed; rarely changes
            return
        self.share = share
        for slot in self.slots:
            slot.share = share
            for st in slot.models.values():
                st.share = share

    def retire(self, slot: KeySlot) -> None:
        slot.state = RETIRED

    def disable(self, slot: KeySlot, reason: str) -> None:
        slot.state = DISABLED
        slot.reason = reason

    def enable(self, slot: KeySlot) -> None:
        slot.state = ACTIVE
        slot.reason = None
        for st in slot.models.values():  # an operator's word: try it again now
            st.cooling_until = 0.0
            st.steps = 0
