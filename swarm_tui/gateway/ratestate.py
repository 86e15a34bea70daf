"""Rate state per key *and* model: pace instead of colliding.

Gateways limit per key and model (OpenAI's limits are per model; LiteLLM answers one
model group's 429 while the others are fine), so one model's 429s must not stop another —
unless the quota is the key's (a LiteLLM virtual key's limit, llmock): then the key's
models share one state (keypool.KeySlot.shared_quota_seen learns it, or the config says).

- With `x-ratelimit-limit/remaining/reset-requests` the budget is *learned*: a token
  bucket holding what the gateway says remains (less our own calls still in flight),
  refilled at the rate the headers imply, so sends wait for the next free slot — not
  for a full refill.
- Without them, AIMD: a lone 429 (the simulator's and the team's 0.3–3 % of peak-hour
  noise) only delays its own task; a *storm* — at least 3 of the calls sent since the
  last decrease, and 25 % of them — cools the key-model (Retry-After, or 1, 2, 4 … s),
  halves its pace, and the pace then grows back by 2 calls/s (or 10 %) every second.
- Escalation counts only 429s on calls sent after the previous cooldown began: ten
  calls that fail together are one event, not ten.
- With `x-ratelimit-limit/remaining/reset-tokens` (a tokens-per-minute quota: OpenAI's,
  LiteLLM's, llmock's) a second bucket, in tokens: each call takes what the gateway admits
  it at (its prompt's estimate plus its max_tokens), and the next waits until the bucket
  holds a call's worth. Without it a TPM quota answered half of all calls with 429s while
  the request headers said the key was open.
Every cooldown is capped by `retry_after_cap_s`.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import re
from dataclasses import dataclass, field

STORM_MIN_429 = 3
STORM_SHARE = 0.25         # random 429s (≤ 3 % at peak, 10 % in the tests) stay below it
BACKOFF_BASE_S = 1.0
DECREASE = 0.5
INCREASE_PER_S = 2.0      # additive increase of the allowed calls/s, per second …
INCREASE_SHARE = 0.10     # … or 10 % of the pace per second, whichever is more
MIN_RATE = 0.2            # calls/s: a cooled key-model still probes every 5 s
RATE_WINDOW_S = 2.0       # over which the send rate is measured
CALM_UNPACE_S = 30.0      # no storm for this long and pace far above use: unpaced again
PROBE_POLL_S = 0.05       # parked tasks look again this often while the first call is out
SENDS_KEPT_S = 120.0      # send times kept (to place an answer among our later sends)
SCALE_MIN, SCALE_MAX = 0.25, 8.0  # a gateway's tokens per token of our prompt estimate


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?"
                       r"(?:(\d+(?:\.\d+)?)ms)?$")


def parse_reset(value: str | None) -> float | None:
    """x-ratelimit-reset-*: `1s`, `6m0s`, `250ms`, or plain seconds."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:  # `nan`, `inf` or a negative wait is no reset time
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    m = _DURATION.match(value.strip())
    if not m or not any(m.groups()):
        return None
    h, mi, s, ms = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000


def _quota(headers: dict[str, str], kind: str, share: float, floor: float
           ) -> tuple[float, float, float] | None:
    """A quota from x-ratelimit-limit/remaining/reset-KIND (`requests`, `tokens`), at this
    process's share of it (workers split a key's quota): (refill per second, bucket size,
    remaining), or None. The header's limit is per minute (OpenAI, LiteLLM, llmock); the
    bucket holds what remains plus what refills until it is full again."""
    try:
        limit = float(headers[f"x-ratelimit-limit-{kind}"])
        remaining = float(headers[f"x-ratelimit-remaining-{kind}"])
    except (KeyError, ValueError):
        return None
    if not (math.isfinite(limit) and math.isfinite(remaining)) or limit <= 0:
        return None  # `nan` made every wait nan (and `inf` every bucket endless): unlearned
    limit, remaining = limit * share, max(0.0, remaining) * share
    reset = parse_reset(headers.get(f"x-ratelimit-reset-{kind}"))
    rate = limit / 60.0
    capacity = max(floor, remaining + reset * rate) if reset else limit
    return max(rate, MIN_RATE), capacity, remaining


@dataclass(slots=True)
class TokenQuota:
    """A key-model's tokens-per-minute quota as the gateway counts it, in tokens."""

    rate: float = 0.0             # tokens/s
    capacity: float = 0.0
    level: float = 0.0
    updated: float = 0.0
    learned_sent: float = -math.inf
    # what the next call is charged, as far as is known: the last one sent, or the one a
    # pick found short (the call now waiting) — the wait the parked tasks are timed by
    need: float = 1.0
    # gateway tokens per token of our estimate: each gateway counts its own way (llmock:
    # the body's bytes / 4; OpenAI: characters), so a refusal the bucket did not foresee
    # charges every later call 25 % more, and each answer while the quota binds 1 % less
    scale: float = 1.0
    # when the scale last went up: refusals of calls sent before it were sent at the old
    # scale, one event with the refusal that raised it (a burst of 10 is one step, not 10)
    raised_at: float = -math.inf

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + max(0.0, now - self.updated) * self.rate)
        self.updated = now

    def wait(self, now: float, tokens: float = 0.0) -> float:
        """Until a call charged `tokens` of our estimate fits (0: the next call's, `need`).
        A call that does not fit becomes the one the next wait is timed for."""
        self.refill(now)
        if tokens:
            self.need = max(1.0, tokens * self.scale)
        return 0.0 if self.level >= self.need else (self.need - self.level) / self.rate


@dataclass(slots=True)
class RateState:
    """One key on one model. Times are monotonic seconds."""

    rate: float | None = None     # allowed calls/s; None: unpaced
    capacity: float = 1.0         # bucket size (burst)
    level: float = 0.0            # whole calls that may go now
    updated: float = 0.0
    learned: bool = False         # pace from the gateway's headers (else AIMD)
    cooling_until: float = 0.0
    round_start: float = -math.inf  # calls sent before this belong to an older event
    steps: int = 0                # cooldowns in a row without a success since
    round_calls: int = 0
    round_429: int = 0
    last_storm: float = -math.inf
    in_flight: int = 0
    probing: bool = True          # no answer yet: one call finds out the quota first
    rate_limited: int = 0
    sends: list[float] = field(default_factory=list)  # send times, oldest first
    learned_sent: float = -math.inf  # the send time of the call whose headers we trust
    failing_since: float | None = None  # first 429 since its last success
    # this process's part of the gateway's quota when several share the key (a run's
    # workers): what the headers say remains and refills is counted at this share
    share: float = 1.0
    tokens: TokenQuota | None = None  # learned from x-ratelimit-*-tokens
    sent_tokens: list[float] = field(default_factory=list)  # running total, as `sends`
    # the last learning's surprise: (heard before, this call's send, calls, tokens) — how
    # far the gateway's count fell below ours since we last heard, beyond our own calls:
    # what someone else spent of this quota (KeySlot.shared_quota_seen reads it)
    gap: tuple[float, float, float, float] | None = None

    # -- asking ------------------------------------------------------------------------------
    def _refill(self, now: float) -> None:
        if self.rate is None:
            return
        dt = max(0.0, now - self.updated)
        if not self.learned:  # AIMD: additive increase while calm
            self.rate += max(INCREASE_PER_S, INCREASE_SHARE * self.rate) * dt
            if now - self.last_storm > CALM_UNPACE_S and self.rate > 2 * self.send_rate(now) + 5:
                self.rate = None
                return
            self.capacity = max(1.0, self.rate * 0.25)
        self.level = min(self.capacity, self.level + dt * self.rate)
        self.updated = now

    def ready_in(self, now: float, tokens: float = 0.0) -> float:
        """Seconds until this key may take a call on this model (0: now); `tokens`: that
        call's charge against a tokens-per-minute quota (0: as the last call's)."""
        wait = max(0.0, self.cooling_until - now)
        if self.probing and self.in_flight:
            # the first answer brings the gateway's x-ratelimit-* (or says there are none):
            # a burst before it would spend a whole quota on 429s
            return max(wait, PROBE_POLL_S)
        self._refill(now)
        if self.rate is not None and self.level < 1.0:
            wait = max(wait, (1.0 - self.level) / self.rate)
        if self.tokens is not None:
            wait = max(wait, self.tokens.wait(now, tokens))
        return wait

    def headroom(self, now: float) -> float:
        self._refill(now)
        calls = math.inf if self.rate is None else self.level
        if self.tokens is not None:
            self.tokens.refill(now)
            calls = min(calls, self.tokens.level / self.tokens.need)
        return calls

    def send_rate(self, now: float) -> float:
        return (len(self.sends) - bisect.bisect_left(self.sends, now - RATE_WINDOW_S)
                ) / RATE_WINDOW_S

    def sent_since(self, t: float) -> int:
        return len(self.sends) - bisect.bisect_right(self.sends, t)

    def tokens_sent_since(self, t: float) -> float:
        i = bisect.bisect_right(self.sends, t)
        if i >= len(self.sends):
            return 0.0
        return self.sent_tokens[-1] - (self.sent_tokens[i - 1] if i else 0.0)

    def tokens_between(self, a: float, b: float) -> float:
        """What the calls sent in (a, b] charge a learned tokens quota (at its scale)."""
        scale = self.tokens.scale if self.tokens is not None else 1.0
        return (self.tokens_sent_since(a) - self.tokens_sent_since(b)) * scale

    def heard_at(self) -> float:
        """The send time of the answer whose x-ratelimit-* this state last learned from."""
        q = self.tokens
        return max(self.learned_sent, -math.inf if q is None else q.learned_sent)

    @classmethod
    def merged(cls, base: RateState, others: list[RateState], share: float) -> RateState:
        """One state for a key's models: the quota as `base` just learned it from the
        gateway, less what the others sent since; every model's sends in one log (so the
        next answer's count takes off all later calls), their calls in flight, the longest
        cooldown."""
        calls = sorted((t, c) for st in (base, *others) for t, c in st._per_call())
        out = cls(share=share, probing=False, rate=base.rate, capacity=base.capacity,
                  level=base.level, updated=base.updated, learned=base.learned,
                  learned_sent=base.learned_sent, cooling_until=base.cooling_until,
                  rate_limited=base.rate_limited, failing_since=base.failing_since)
        total = 0.0
        for t, c in calls:
            total += c
            out.sends.append(t)
            out.sent_tokens.append(total)
        q = None if base.tokens is None else dataclasses.replace(base.tokens)
        out.tokens = q
        for o in others:
            out.in_flight += o.in_flight
            out.cooling_until = max(out.cooling_until, o.cooling_until)
            out.rate_limited += o.rate_limited
            if out.learned and out.rate is not None:
                out.level -= o.sent_since(out.learned_sent)
            if q is not None:
                q.level -= o.tokens_sent_since(q.learned_sent) * q.scale
        out.in_flight += base.in_flight
        return out

    def _per_call(self) -> list[tuple[float, float]]:
        prev = [0.0, *self.sent_tokens[:-1]]
        return [(t, c - p) for t, c, p in zip(self.sends, self.sent_tokens, prev, strict=True)]

    # -- telling -----------------------------------------------------------------------------
    def take(self, now: float, tokens: float = 0.0) -> None:
        """A call goes out; `tokens`: what the gateway will charge it (prompt + max_tokens)."""
        self._refill(now)
        if self.rate is not None:
            self.level -= 1.0
        if self.tokens is not None:
            q = self.tokens
            q.refill(now)
            q.level -= tokens * q.scale
            q.need = max(1.0, tokens * q.scale)
        self.in_flight += 1
        self.sends.append(now)
        self.sent_tokens.append((self.sent_tokens[-1] if self.sent_tokens else 0.0) + tokens)
        if len(self.sends) > 4096 and self.sends[0] < now - SENDS_KEPT_S:
            cut = bisect.bisect_left(self.sends, now - SENDS_KEPT_S)
            del self.sends[:cut]
            del self.sent_tokens[:cut]

    def done(self, now: float, sent_at: float, headers: dict[str, str] | None,
             ok: bool) -> None:
        self.in_flight -= 1
        self.probing = False
        if headers:
            self._learn(headers, now, sent_at)
        if ok:
            self.failing_since = None
        if sent_at >= self.round_start:
            self.round_calls += 1
            if ok:
                self.steps = 0

    def _learn(self, headers: dict[str, str], now: float, sent_at: float,
               refused: bool = False) -> None:
        """The gateway's own count: what remained when it admitted this call, and how fast
        it refills. Answers arrive out of order, so an answer older than the one we
        already learned from is ignored, and our calls sent after this one (answered or
        not) are taken off what remained.

        A refusal is the gateway's word as of its answer, not of our send: no refill is
        credited between them. On a loaded core that gap is the event loop's lag (tens to
        hundreds of ms), and at 100 calls/s crediting it made an empty quota look open —
        one demo key drew ~250 429s before it cooled."""
        seen = now if refused else sent_at
        heard, q = self.heard_at(), self.tokens
        before_tokens = None
        if q is not None:
            q.refill(now)
            before_tokens = q.level
        self._learn_tokens(headers, now, sent_at, seen, refused)
        q = self.tokens
        heard_tokens = q is not None and q.learned_sent == seen
        gap_tokens = 0.0
        if before_tokens is not None and q is not None and heard_tokens:
            # a refused call was taken off our count, never off the gateway's
            own = self.charge_of(sent_at) * q.scale if refused else 0.0
            gap_tokens = before_tokens + own - q.level
        gap_calls = 0.0
        heard_calls = False
        if seen >= self.learned_sent and (got := _quota(headers, "requests", self.share,
                                                         1.0)) is not None:
            heard_calls = True
            self._refill(now)
            before = self.level if self.learned else None
            self.learned = True
            self.rate, self.capacity, remaining = got
            self.learned_sent = seen
            self.level = min(self.capacity, remaining + self.rate * max(0.0, now - seen)
                             - self.sent_since(sent_at))
            self.updated = now
            if before is not None:
                gap_calls = before + (1.0 if refused else 0.0) - self.level
        if not (heard_tokens or heard_calls):  # an older answer than the count we have
            return
        self.gap = (heard, sent_at, gap_calls, gap_tokens) if heard > -math.inf else None

    def charge_of(self, sent_at: float) -> float:
        """Our estimate of the call sent at `sent_at` (the latest sent then)."""
        i = bisect.bisect_right(self.sends, sent_at)
        if not i:
            return 0.0
        return self.sent_tokens[i - 1] - (self.sent_tokens[i - 2] if i > 1 else 0.0)

    def _learn_tokens(self, headers: dict[str, str], now: float, sent_at: float,
                      seen: float, refused: bool) -> None:
        """The tokens bucket, as `_learn` the requests one: what remained when the gateway
        admitted (or refused) this call, less the tokens of our calls sent after it."""
        q = self.tokens
        if q is not None and seen < q.learned_sent:
            return
        got = _quota(headers, "tokens", self.share, 1.0 if q is None else q.need)
        if got is None:
            return
        if q is None:
            q = self.tokens = TokenQuota()
        q.rate, q.capacity, remaining = got
        if q.learned_sent == -math.inf and not refused:
            q.scale = self._first_scale(q.rate * 60 / self.share, remaining, sent_at)
        q.level = min(q.capacity, remaining + q.rate * max(0.0, now - seen)
                      - self.tokens_sent_since(sent_at) * q.scale)
        q.updated = now
        q.learned_sent = seen
        if refused:
            # the bucket said it fitted, the gateway did not: it charges more than we count.
            # Whether what it says remains is below our charge or not: above it says so the
            # more plainly (a refusal once read as "admitted while binding" lowered the
            # scale, and the next call went out early again — one key drew 12 429s in 45
            # calls, each resend 20 ms early)
            if sent_at >= q.raised_at:
                q.scale = min(SCALE_MAX, q.scale * 1.25)
                q.need *= 1.25
                q.raised_at = now
        elif q.need <= q.level < 2 * q.need:  # admitted while the quota binds: a little closer
            q.scale = max(SCALE_MIN, q.scale * 0.99)

    def _first_scale(self, limit: float, remaining: float, sent_at: float) -> float:
        """How the gateway counts, from the first answer on this key-model — before the
        burst that follows spends the bucket by our estimate: what it took off its full
        bucket (limit - remaining) against our estimate of the calls we had sent by then.
        On llmock (bytes / 4) our estimate is ~20 % short, and a first burst of 40 drew
        ~20 % 429s before refusals taught the scale. Only a clear case counts: a key not
        shared with workers, and a ratio in (1, 2] — more says the bucket was not full
        (another client on the key), and refusals teach the rest as before."""
        if self.share != 1.0:
            return 1.0
        i = bisect.bisect_right(self.sends, sent_at)
        ours = self.sent_tokens[i - 1] if i else 0.0
        ratio = (limit - remaining) / ours if ours > 0 else math.nan
        return ratio if 1.0 < ratio <= 2.0 else 1.0

    def _quota_wait(self, now: float) -> tuple[float, str] | None:
        """What a learned quota makes the next call wait, and which (None: neither)."""
        self._refill(now)
        waits = []
        if self.learned and self.rate and self.level < 1.0:
            waits.append(((1.0 - self.level) / self.rate,
                          f"quota spent: next call in {{:.1f}} s (~{self.rate * 60:.0f}/min)"))
        q = self.tokens
        if q is not None and (token_wait := q.wait(now)) > 0:
            waits.append((token_wait, f"token quota spent: next call in {{:.1f}} s "
                                      f"(~{q.rate * 60:,.0f} tokens/min)"))
        return max(waits) if waits else None

    def rate_limited_call(self, now: float, sent_at: float, retry_after_s: float | None,
                          headers: dict[str, str] | None, cap_s: float) -> str | None:
        """A 429 on a call of this key-model. Returns what changed (for the log) when the
        key-model itself slows down; None when only the call's task waits."""
        self.in_flight -= 1
        self.probing = False
        self.rate_limited += 1
        if self.failing_since is None:
            self.failing_since = now
        if headers and ("x-ratelimit-remaining-requests" in headers
                        or "x-ratelimit-remaining-tokens" in headers):
            self._learn(headers, now, sent_at, refused=True)
            spent = self._quota_wait(now)
            if spent is not None:
                wait = min(cap_s, max(spent[0], retry_after_s or 0.0))
                self.cooling_until = max(self.cooling_until, now + wait)
                return spent[1].format(wait)
            return None
        if sent_at < self.round_start:
            return None  # part of the event already answered
        self.round_calls += 1
        self.round_429 += 1
        # share of the calls *sent* in this round (a 429 comes back in milliseconds, an
        # answer in hundreds: counting only what came back would see every burst as a storm)
        sent = max(self.round_calls, self.sent_since(self.round_start))
        if self.round_429 < STORM_MIN_429 or self.round_429 < STORM_SHARE * sent:
            return None
        # a storm: one cooldown step for every call sent since the last one began
        self.steps += 1
        wait = retry_after_s if retry_after_s is not None else BACKOFF_BASE_S * 2 ** (
            self.steps - 1)
        wait = min(wait, cap_s)
        used = self.send_rate(now)
        self._refill(now)
        self.rate = max(MIN_RATE, DECREASE * used)
        self.learned = False
        self.capacity = max(1.0, self.rate * 0.25)
        self.level = 0.0
        self.updated = now + wait
        self.cooling_until = max(self.cooling_until, now + wait)
        self.round_start = now
        self.round_calls = self.round_429 = 0
        self.last_storm = now
        return f"429 storm: cooling {wait:.1f} s, then ≤ {self.rate:.1f} calls/s"
