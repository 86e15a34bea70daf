"""The sections a run and the console read — retries, the store's grace, the console,
price overrides, alerts and their webhooks, telemetry — as plain dataclasses validated by
pydantic like those in sections.py. Apart from those so that a command that only reads a
store (settings/view.py) builds none of them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Literal
from urllib.parse import urlsplit

from swarm_tui.core.checks import After, JsonAs, Limits
from swarm_tui.prices import PerMillion
from swarm_tui.redact import secret_tag
from swarm_tui.settings.sections import Duration, PosFloat, Section, UrlField

# a whole-value secret (a webhook URL is a credential): its tag in any JSON dump
SecretStrField = Annotated[str, JsonAs(secret_tag)]


@dataclass(kw_only=True)
class RetryConfig(Section):
    """[retry]: attempts, backoff, Retry-After cap, how long a task waits out 429s."""

    max_attempts: Annotated[int, Limits(ge=1, le=20)] = 3
    base_backoff_s: PosFloat = 0.25
    max_backoff_s: PosFloat = 8.0
    retry_after_cap_s: PosFloat = 30.0
    # a task waits out 429s (they never spend its attempts) this long before its fallback
    # model or failure
    rate_limit_max_wait_s: PosFloat = 600.0


@dataclass(kw_only=True)
class PriceOverride(Section):
    """[prices."model"]: a price that overrides the shipped table."""

    input: PerMillion
    output: PerMillion
    cached_input: PerMillion | None = None
    source: str = "user config"
    checked: str | None = None


@dataclass(kw_only=True)
class StoreConfig(Section):
    """[store]: how long a run waits on an unwritable database; when a WAL is too big."""

    # how long dispatch stays paused on an unwritable database before the run stops
    # (calls in flight are awaited and journaled; exit 2)
    unwritable_grace_s: PosFloat = 60.0
    # SQLite: a WAL past this many MiB that a checkpoint cannot take back (a reader holds a
    # read open) is warned about, naming the reader; again each time it doubles
    wal_warn_mib: PosFloat = 128.0


class AlertKind(StrEnum):
    """What an alert is about (a webhook's `events` picks among them)."""

    CANARY_PROMOTE = "canary_promote"
    CANARY_ABORT = "canary_abort"
    CANARY_PAUSE = "canary_pause"
    SLA_BREACH = "sla_breach"          # sustained for [alerts] sla_sustain
    BUDGET_80 = "budget_80"
    BUDGET_STOP = "budget_stop"
    KEYS_EXHAUSTED = "keys_exhausted"  # every key of a gateway cooling, disabled or retired
    RUN_FINISHED = "run_finished"
    RUN_FAILED = "run_failed"          # the store failed under it (exit 2)
    RUN_INTERRUPTED = "run_interrupted"  # cancelled, hung up or stopped at the budget cap


@dataclass(kw_only=True)
class WebhookConfig(Section):
    """One alert receiver. The URL is a secret (a Slack webhook URL is a credential): give it
    in the environment (`url_env`) or the file; it is shown and logged by `name` only."""

    name: str
    url: SecretStrField | None = None  # stored and shown as its tag only
    url_env: str | None = None
    # json (ours), slack ({"text"}), pagerduty (Events API v2: POST
    # https://events.pagerduty.com/v2/enqueue), alertmanager (POST …/api/v2/alerts)
    format: Literal["json", "slack", "pagerduty", "alertmanager"] = "json"
    # PagerDuty's integration key: a credential, as the URL (the environment, or the file)
    routing_key: SecretStrField | None = None
    routing_key_env: str | None = None
    events: list[AlertKind] = field(default_factory=lambda: list(AlertKind))

    def __post_init__(self) -> None:  # pydantic runs it too: its ValueError is one error line
        if (self.url is None) == (self.url_env is None):
            raise ValueError(f"webhook '{self.name}': give exactly one of url / url_env")
        if self.url is not None and not re.match(r"https?://", self.url):
            raise ValueError(f"webhook '{self.name}': url must start with http:// or https://")
        if self.format == "pagerduty" and (self.routing_key is None) == (
                self.routing_key_env is None):
            raise ValueError(f"webhook '{self.name}': pagerduty needs exactly one of "
                             "routing_key / routing_key_env")

    def resolved_url(self) -> str | None:
        return self.url if self.url is not None else os.environ.get(self.url_env or "")

    def resolved_routing_key(self) -> str:
        if self.routing_key is not None:
            return self.routing_key
        return os.environ.get(self.routing_key_env or "", "")

    def unset_variable(self) -> str | None:
        """The environment variable this receiver's URL or PagerDuty key is named in but
        not set (or empty) in this process; None when it has what it needs."""
        if self.url_env is not None and not os.environ.get(self.url_env):
            return self.url_env
        if (self.format == "pagerduty" and self.routing_key_env is not None
                and not os.environ.get(self.routing_key_env)):
            return self.routing_key_env
        return None


def _console_url(v: str) -> str:
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http:// or https:// address")
    if "@" in parts.netloc or parts.query or parts.fragment:
        # it goes into every page: no user:password, no token (serve's login is a cookie)
        raise ValueError("must be a plain address: no user:password@, ?query or #fragment")
    return v.rstrip("/")


@dataclass(kw_only=True)
class AlertsConfig(Section):
    """[alerts]: webhooks, the SLA breach's window and patience, delivery."""

    webhooks: list[WebhookConfig] = field(default_factory=list)
    # an SLA breach alerts once it has held this long (one bad interval is not an incident)
    sla_sustain: Duration = 120.0
    sla_window: Duration = 60.0     # the rolling window its p95 / success are taken over
    sla_min_calls: Annotated[int, Limits(ge=1)] = 50
    attempts: Annotated[int, Limits(ge=1, le=20)] = 5   # per delivery, with backoff
    timeout_s: PosFloat = 5.0       # per HTTP request
    # at the end of a run, how long its last alerts may hold the exit
    drain_s: Annotated[float, Limits(ge=0, le=120)] = 10.0
    # where the engineers open `swarm-tui serve` (their tunnel's address, or --public-url):
    # every alert then links to its moment there, `<console_url>/at/RUN/TIME`
    console_url: Annotated[str, After(_console_url)] | None = None

    def unreachable_receivers(self) -> list[str]:
        """A line for each receiver that could not be paged from this process: said when
        the run starts, not first noticed by the alert it fails to deliver."""
        return [f"alerts: webhook '{hook.name}': ${var} is not set; its alerts will not be "
                "delivered" for hook in self.webhooks if (var := hook.unset_variable())]


@dataclass(kw_only=True)
class TelemetryConfig(Section):
    """OpenTelemetry traces (the `otel` extra): one span per attempt, exported over OTLP/HTTP
    to `otlp_endpoint`; nothing at all when it is unset."""

    otlp_endpoint: UrlField | None = None
    service_name: str = "swarm-tui"


@dataclass(kw_only=True)
class UiConfig(Section):
    """[ui]: theme, refresh, first view, key bindings."""

    theme: str | None = None        # default swarm-dark; a gateway's own theme wins
    refresh_s: Annotated[float, Limits(ge=0.05, le=10)] = 0.25
    # the dashboard's first view: one cell per concurrency slot, or every task (key v)
    view: Literal["agents", "tasks"] = "agents"
    keys: dict[str, str] = field(default_factory=dict)  # binding id -> keys, e.g. "run.pause"
