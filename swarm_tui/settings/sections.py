"""The config's sections as plain records (core/record.py): what the engine, the store,
the canary and the reports read. settings/loader.py validates a TOML file into them with
pydantic-settings (flags, environment, file; the checks are core/checks.py's markers, read
by pydantic, which sees them as dataclasses); a
command that reads a validated copy (settings/snapshot.py) builds them without pydantic,
so `report`, `keys list` and `canary status` start in a few tens of milliseconds.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import urlsplit

from swarm_tui.core.checks import STRICT, After, Before, Finite, JsonAs, Limits, first_error
from swarm_tui.core.record import field, record
from swarm_tui.redact import without_userinfo

if TYPE_CHECKING:
    from pydantic import ValidationError

SIM_GATEWAY = "sim"  # reserved gateway name: the built-in simulator

# a URL that may carry userinfo: kept, less its userinfo, in any JSON dump
UrlField = Annotated[str, JsonAs(without_userinfo)]
# finite: TOML has `inf` (and `nan`), and a budget or a timeout of inf is no figure
PosFloat = Annotated[float, Limits(gt=0), Finite()]


class Section:
    __pydantic_config__ = STRICT  # an unknown key is an error


def _http_url(v: str) -> str:
    if not v.startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https://")
    if "@" in urlsplit(v).netloc:
        # a URL's user:password would be stored, shown and logged with it, and cannot
        # go with the key's Bearer header (the transport refuses both at once)
        raise ValueError("must not carry user:password@ (the gateway's credential is "
                         "its key: key_env or key_file)")
    return v.rstrip("/")


@record(kw_only=True)
class GatewayConfig(Section):
    """[gateways.NAME]: an OpenAI-compatible gateway, its keys and limits."""

    # stored and shown without any user:password@
    base_url: Annotated[str, After(_http_url), JsonAs(without_userinfo)]
    # env vars holding keys (each may be comma-separated)
    key_env: list[str] = field(default_factory=list)
    key_file: Path | None = None
    # mutual TLS: the certificate (PEM, its chain after it; the key too, or in client_key)
    # a gateway that asks for one is shown (gateway/client_cert.py)
    client_cert: Path | None = None
    client_key: Path | None = None
    timeout_s: PosFloat = 30.0
    max_concurrency: Annotated[int, Limits(ge=1, le=10_000)] = 140
    stream: bool = True
    model: str | None = None  # pins every task on this gateway to one model
    theme: str | None = None
    # which key takes the next call: least-in-flight | round-robin | proactive (the key
    # with the most x-ratelimit-remaining headroom; waits instead of hitting a 429)
    key_strategy: Literal["least-in-flight", "round-robin", "proactive"] = "least-in-flight"
    # whose is a learned x-ratelimit quota: each model's (OpenAI, a provider behind
    # LiteLLM), the key's across its models (a LiteLLM virtual key's tpm/rpm limit,
    # llmock), or auto: per model until answers show the key's models spend one quota
    quota_scope: Literal["auto", "model", "key"] = "auto"

    def __post_init__(self) -> None:  # pydantic runs it too: its ValueError is one error line
        if self.client_key is not None and self.client_cert is None:
            raise ValueError("client_key without client_cert (the certificate it goes with)")
        if self.client_cert is not None and not self.base_url.startswith("https://"):
            raise ValueError("client_cert is shown over TLS only: base_url must be https://")


@record(kw_only=True)
class RoutingConfig(Section):
    """[routing]: long prompts to one model, short to another; fallbacks."""

    enabled: bool = True
    long_context_tokens: Annotated[int, Limits(ge=1)] = 1000
    long_model: str = "kimi-k2.5"
    short_model: str = "deepseek-v3.2"
    fallback: dict[str, list[str]] = field(default_factory=lambda: {
        "kimi-k2.5": ["deepseek-v3.2"], "deepseek-v3.2": ["kimi-k2.5"]})


@record(kw_only=True)
class SlaConfig(Section):
    """[sla]: the p95 and the success rate a run is judged by."""

    p95_ms: PosFloat = 350.0
    min_success: Annotated[float, Limits(ge=0, le=1)] = 0.99
    # which success rate the SLA judges: per call (as the team measured its gateways: every
    # answered call, retries and 429s included) or per task (after retries and fallbacks)
    success_basis: Literal["call", "task"] = "call"


def parse_duration(v: object) -> float:
    """Seconds from a number or a string like "24h", "30m", "90s", "1.5s"."""
    if isinstance(v, bool):
        raise ValueError("a duration is a number of seconds or a string like 24h / 30m / 90s")
    if isinstance(v, int | float):
        seconds = float(v)
    elif isinstance(v, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", v)
        if not m:
            raise ValueError(f"'{v}' is not a duration (use e.g. 24h, 30m, 90s)")
        seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    else:
        raise ValueError("a duration is a number of seconds or a string like 24h / 30m / 90s")
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
Duration = Annotated[float, Before(parse_duration)]


@record(kw_only=True)
class CanaryGates(Section):
    """[canary.gates]: what the candidate must show at each stage."""

    p95_ms: PosFloat = 350.0
    min_success: Annotated[float, Limits(ge=0, le=1)] = 0.99
    cost_tolerance: Annotated[float, Limits(ge=0)] = 0.10  # candidate $/task ≤ baseline × (1+tol)
    max_p95_ratio: PosFloat | None = None  # optional: candidate p95 ≤ baseline p95 × ratio
    # a gate fails only on evidence significant at this confidence (Wilson bound for the
    # success rate and the share of calls past p95_ms; Mann-Whitney for the p95 ratio)
    confidence: Annotated[float, Limits(ge=0.5, le=0.999)] = 0.95


def _increasing(v: list[int]) -> list[int]:
    if not v or any(b <= a for a, b in itertools.pairwise(v)) or v[-1] != 100:
        raise ValueError("must be strictly increasing percentages ending at 100")
    return v


@record(kw_only=True)
class CanaryConfig(Section):
    """A baseline and a candidate gateway; traffic moves by user hash, stage by stage."""

    enabled: bool = True
    baseline: str
    candidate: str
    stages: Annotated[list[Annotated[int, Limits(ge=1, le=100)]], After(_increasing)] = field(
        default_factory=lambda: [5, 25, 50, 100])
    bake: Duration | list[Duration] = 86_400.0  # per stage: one value, or one per stage
    mode: Literal["manual", "auto"] = "manual"
    min_samples: Annotated[int, Limits(ge=1)] = 100
    failure_limit: Annotated[int, Limits(ge=1)] = 3
    interval: Duration = 10.0   # how often the running process evaluates the gates
    window: Duration = 900.0    # the rolling window shown next to the stage's figures
    gates: CanaryGates = field(default_factory=CanaryGates)

    def __post_init__(self) -> None:  # pydantic runs it too: its ValueError is one error line
        if isinstance(self.bake, list) and len(self.bake) != len(self.stages):
            raise ValueError(f"bake: {len(self.bake)} values for {len(self.stages)} stages")
        if self.baseline == self.candidate:
            raise ValueError("baseline and candidate must be different gateways")

    @property
    def name(self) -> str:
        return f"{self.baseline}->{self.candidate}"

    def bake_s(self, stage: int) -> float:
        if isinstance(self.bake, list):
            return self.bake[min(max(stage, 0), len(self.bake) - 1)]
        return self.bake


SIM_CANARY_GATEWAY = "sim-canary"
# A canary on the simulator for demos: 30 s bakes, so a few minutes show every stage.
SIM_CANARY = CanaryConfig(baseline=SIM_GATEWAY, candidate=SIM_CANARY_GATEWAY, mode="auto",
                          bake=30.0, min_samples=100, interval=5.0, window=120.0)


def format_validation_error(place: str, err: ValidationError) -> str:
    """One line: the place, the dotted key, what is wrong (+ how many more)."""
    key, msg, more = first_error(err)
    return f"{place}: {key or '(top level)'}: {msg}" + (f" (+{more} more)" if more else "")
