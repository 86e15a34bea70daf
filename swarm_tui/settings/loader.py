"""Validated configuration as pydantic-settings layers, highest first: command-line flags,
SWARM_TUI__* environment variables, the TOML file, the defaults.

No config file at all means the built-in simulator (labelled SIMULATED).
"""

from __future__ import annotations

import contextvars
import hashlib
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from swarm_tui.core.plain import as_plain
from swarm_tui.core.record import as_dataclass
from swarm_tui.errors import UserError
from swarm_tui.paths import config_file
from swarm_tui.prices import PriceTable, load_price_table
from swarm_tui.settings.run_sections import (
    AlertsConfig,
    PriceOverride,
    RetryConfig,
    StoreConfig,
    TelemetryConfig,
    UiConfig,
)
from swarm_tui.settings.sections import (
    SIM_GATEWAY,
    CanaryConfig,
    GatewayConfig,
    PosFloat,
    RoutingConfig,
    SlaConfig,
    format_validation_error,
)
from swarm_tui.token_count import TokenCounts
from swarm_tui.token_count import configure as configure_counts

# pydantic validates the sections as the dataclasses they are shaped as (core/record.py)
for _section in (GatewayConfig, RoutingConfig, SlaConfig, CanaryConfig):
    as_dataclass(_section)


class Settings(BaseSettings):
    """The whole config. Environment (`SWARM_TUI__RETRY__MAX_ATTEMPTS=5`) overrides the file."""

    model_config = SettingsConfigDict(
        env_prefix="SWARM_TUI__", env_nested_delimiter="__", extra="forbid"
    )

    default_gateway: str | None = None
    default_model: str = "deepseek-v3.2"
    concurrency: Annotated[int, Field(ge=1, le=10_000)] = 100
    tasks_per_day: Annotated[int, Field(ge=1)] = 12_000
    budget_usd: PosFloat | None = None  # per-run cap; `run --budget` overrides
    gateways: dict[str, GatewayConfig] = Field(default_factory=dict)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    sla: SlaConfig = Field(default_factory=SlaConfig)
    prices_file: Path | None = None
    prices: dict[str, PriceOverride] = Field(default_factory=dict)
    ui: UiConfig = Field(default_factory=UiConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    canary: CanaryConfig | None = None
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    # model glob -> its tokenizer, from a local file: "kimi-*" = "kimi/tokenizer.json",
    # "gpt-4o*" = "tiktoken:o200k_base" (routing by length and usage a gateway left out;
    # any other model: an estimate that knows scripts)
    tokenizers: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Flags arrive as init kwargs (the top layer), then the environment, then the file.
        return (init_settings, env_settings, _FileSource(settings_cls))

    @field_validator("gateways")
    @classmethod
    def _reserved(cls, v: dict[str, GatewayConfig]) -> dict[str, GatewayConfig]:
        if SIM_GATEWAY in v:
            raise ValueError(f"'{SIM_GATEWAY}' is reserved for the built-in simulator")
        return v


# The TOML file's contents for the Settings being built (load_config sets it): a
# contextvar, because pydantic-settings builds sources from the class, not the instance.
_FILE_DATA: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "swarm_tui_config_file", default=None)


class _FileSource(PydanticBaseSettingsSource):
    """The config file's layer (read and checked by load_config for one-line errors)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return (_FILE_DATA.get() or {}).get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_FILE_DATA.get() or {})


# The flags that are settings, and where each lands: `--budget 5` is `budget_usd = 5`
# given on top of the environment and the file (the other flags are per-run options).
FLAG_SETTINGS: dict[str, tuple[str, ...]] = {
    "concurrency": ("concurrency",),
    "budget": ("budget_usd",),
    "theme": ("ui", "theme"),
    "refresh": ("ui", "refresh_s"),
}


def _flag_layer(flags: dict[str, Any]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    for flag, value in flags.items():
        if value is None:
            continue
        *parents, leaf = FLAG_SETTINGS[flag]
        node = layer
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return layer


def _layer_error(place: str, err: ValidationError, given: dict[str, Any]) -> str:
    """The error's place: the flag when a given flag's value is what failed (it is the
    top layer, so the value checked came from it), else the file / environment."""
    first = err.errors()[0]["loc"]
    for flag in given:
        if tuple(str(p) for p in first) == FLAG_SETTINGS[flag]:
            return f"--{flag}: {err.errors()[0]['msg']}"
    return format_validation_error(place, err)


class LoadedConfig(BaseModel):
    """Settings plus where they came from and the resolved price table."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    settings: Settings
    path: Path | None  # None: no file, built-in simulator only
    prices: PriceTable
    prices_file: Path | None = None  # the price file it read, if the config names one
    file_digest: str | None = None   # SHA-256 of the config file's bytes as read
    file_secrets: list[str] = Field(default_factory=list)  # written in the file itself

    @property
    def simulated_only(self) -> bool:
        return not self.settings.gateways


def _read_toml(path: Path) -> tuple[dict[str, Any], str]:
    """The file's tables and the SHA-256 of the very bytes they came from."""
    try:
        raw = path.read_bytes()
        # utf-8-sig: a BOM (a file saved by Notepad) is no "invalid statement"
        return tomllib.loads(raw.decode("utf-8-sig")), hashlib.sha256(raw).hexdigest()
    except FileNotFoundError:
        raise UserError(f"config {path}: file not found") from None
    except PermissionError:
        raise UserError(f"config {path}: permission denied") from None
    except IsADirectoryError:
        raise UserError(f"config {path}: is a directory") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"config {path}: invalid TOML: {e}") from None
    except UnicodeDecodeError:
        raise UserError(f"config {path}: not UTF-8 text") from None


def load_config(cli_path: str | None = None, flags: dict[str, Any] | None = None
                ) -> LoadedConfig:
    """`flags`: the command line's settings (FLAG_SETTINGS keys; None = not given)."""
    path = config_file(cli_path)
    data, digest = _read_toml(path) if path else ({}, None)
    place = f"config {path}" if path else "config (environment)"
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    layer = _flag_layer(given)
    token = _FILE_DATA.set(data)
    try:
        # pydantic-settings deep-merges the layers: `--theme` keeps the file's [ui] keys
        settings = Settings(**layer)
    except ValidationError as e:
        raise UserError(_layer_error(place, e, given)) from None
    finally:
        _FILE_DATA.reset(token)
    if settings.default_gateway and settings.default_gateway not in settings.gateways:
        raise UserError(f"{place}: default_gateway: no gateway named '{settings.default_gateway}'")
    if settings.canary is not None:
        for role in ("baseline", "candidate"):
            gw = getattr(settings.canary, role)
            if gw not in settings.gateways:
                raise UserError(f"{place}: canary.{role}: no gateway named '{gw}'")
    base_dir = path.parent if path else Path.cwd()
    prices_file = settings.prices_file
    if prices_file is not None and not prices_file.is_absolute():
        prices_file = base_dir / prices_file
    overrides = {k: as_plain(v) for k, v in settings.prices.items()}
    prices = load_price_table(prices_file, overrides, place)
    routing = settings.routing
    configure_counts(TokenCounts.load(
        settings.tokenizers, place, base_dir,
        routing.short_model if routing.enabled else settings.default_model))
    return LoadedConfig(settings=settings, path=path, prices=prices, prices_file=prices_file,
                        file_digest=digest, file_secrets=_secrets_written_in(data))


def _secrets_written_in(data: dict[str, Any]) -> list[str]:
    """The credentials the file itself holds: a webhook's URL, PagerDuty's key."""
    alerts = data.get("alerts")
    hooks = alerts.get("webhooks") if isinstance(alerts, dict) else None
    found = []
    for i, hook in enumerate(hooks if isinstance(hooks, list) else []):
        if isinstance(hook, dict):
            name = hook.get("name", f"#{i + 1}")
            found += [f"webhook '{name}' {k}" for k in ("url", "routing_key") if k in hook]
    return found


def refuse_shared_secrets(cfg: LoadedConfig) -> None:
    """Before a run sends with them: a config file that holds a credential is its owner's
    alone, as a key file is (any user of the bastion could post to the team's pager)."""
    import stat

    if cfg.path is None or not cfg.file_secrets:
        return
    try:
        mode = stat.S_IMODE(cfg.path.stat().st_mode)
    except OSError:
        return  # read a moment ago; gone now: nothing more is read from it
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UserError(f"config {cfg.path}: holds a secret ({', '.join(cfg.file_secrets)}) "
                        f"and is readable by group/others (mode {mode:o}); chmod 600 it, or "
                        "give the secret in the environment (url_env / routing_key_env)")
