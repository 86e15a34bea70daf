"""What the simulator does: latency profile, injected faults, limits, usage reporting."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from swarm_tui.sim.profiles import get_profile

Rate = Annotated[float, Field(ge=0, le=1)]


class SimSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    profile: str = "gateway"
    # Injected faults, as a fraction of requests. None: the profile's default.
    rate_429: Rate | None = None
    rate_503: Rate | None = None
    rate_cut: Rate = 0.0  # stream cut mid-way (connection dropped)
    rate_hang: Rate = 0.0  # no answer for hang_s (past the client timeout)
    hang_s: Annotated[float, Field(gt=0)] = 120.0
    retry_after_s: Annotated[float, Field(ge=0)] = 1.0
    # per-key request quota: a continuously refilling bucket (OpenAI's and most proxies'
    # model) of `quota_burst` (default: the rpm) calls, refilled at rpm/60 per second;
    # every answer carries x-ratelimit-* headers, a refusal a Retry-After of the real wait
    rpm_per_key: Annotated[int, Field(ge=1)] | None = None
    quota_burst: Annotated[int, Field(ge=1)] | None = None
    # per-model 429s without Retry-After (LiteLLM answers a model group's limit this way)
    model_429: dict[str, Rate] = Field(default_factory=dict)
    rate_stream_error: Rate = 0.0   # an `error` event inside the stream after some chunks
    stream_error_code: int = 503
    fault_models: list[str] | None = None  # stream errors / malformed only on these models
    # a prompt containing this text breaks the stream every time on fault_models (a
    # document the long-context model chokes on: its task retries, then falls back)
    poison_text: str | None = None
    # one key's quota runs out: from `outage_start_s` after that key's first call, for
    # `outage_s`, every call on it is a 429 saying no request remains (x-ratelimit-*,
    # Retry-After: the time left). The key is named by its fingerprint, never by itself.
    outage_key_fp: str | None = None
    outage_start_s: Annotated[float, Field(ge=0)] = 0.0
    outage_s: Annotated[float, Field(ge=0)] = 0.0
    models_fail: Annotated[int, Field(ge=0)] = 0  # the first N GET /models answer 503
    rate_malformed: Rate = 0.0      # a chunk that is not JSON / a truncated JSON body
    ignore_stream: bool = False     # answer one JSON completion to `stream: true`
    keys: list[str] | None = None  # accepted bearer keys; None accepts any non-empty key
    chunks: Annotated[int, Field(ge=1, le=2000)] = 6
    ttft_fraction: Annotated[float, Field(gt=0, le=1)] = 0.35
    usage_mode: Literal["final", "inline", "none"] = "final"
    cached_fraction: Rate = 0.0  # share of prompt tokens reported as cache hits
    usage_style: Literal["openai", "deepseek"] = "openai"  # how cache hits are reported
    default_max_tokens: Annotated[int, Field(ge=1)] = 256
    # how it counts a prompt's tokens: as an o200k-like tokenizer would (swarm-tui's own
    # script-aware estimate), ~4 characters a token, or every UTF-8 byte a token (the most
    # any byte-level BPE can bill: a worst case for budget caps)
    prompt_counting: Literal["estimate", "chars4", "bytes"] = "estimate"
    seed: int | None = None

    @field_validator("profile")
    @classmethod
    def _known(cls, v: str) -> str:
        get_profile(v)  # raises ValueError with the reason
        return v
