"""What the commands that only read a store take from the config: gateways (names, key
sources), the canary, routing, the SLA, the volume, the price table — and no more (no
webhook URL, no telemetry endpoint). Built from a validated config (`ConfigView.of`), or
from its stored plain form (`ConfigView.from_plain`: commands/config_copy.py keeps one per
config file and environment) without importing pydantic.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from swarm_tui.core.plain import as_plain, build
from swarm_tui.core.record import field, record
from swarm_tui.prices import Price, PriceTable
from swarm_tui.settings.sections import CanaryConfig, GatewayConfig, RoutingConfig, SlaConfig

if TYPE_CHECKING:
    from swarm_tui.settings.loader import LoadedConfig


@record(kw_only=True)
class SettingsView:
    """The settings a reading command uses (see the module's docstring)."""

    default_gateway: str | None = None
    default_model: str = "deepseek-v3.2"
    tasks_per_day: int = 12_000
    gateways: dict[str, GatewayConfig] = field(default_factory=dict)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    sla: SlaConfig = field(default_factory=SlaConfig)
    canary: CanaryConfig | None = None


@record(kw_only=True)
class ConfigView:
    """Those settings, the config file's path and the resolved price table."""

    settings: SettingsView
    path: Path | None  # None: no file, built-in simulator only
    prices: PriceTable

    @property
    def simulated_only(self) -> bool:
        return not self.settings.gateways

    @classmethod
    def of(cls, cfg: LoadedConfig) -> ConfigView:
        s = cfg.settings
        return cls(settings=SettingsView(
            default_gateway=s.default_gateway, default_model=s.default_model,
            tasks_per_day=s.tasks_per_day, gateways=dict(s.gateways), routing=s.routing,
            sla=s.sla, canary=s.canary), path=cfg.path, prices=cfg.prices)

    def to_plain(self) -> dict[str, Any]:
        return {"settings": as_plain(self.settings),
                "path": None if self.path is None else str(self.path),
                "prices": as_plain(self.prices.prices)}

    @classmethod
    def from_plain(cls, data: dict[str, Any]) -> ConfigView:
        """From to_plain's output (trusted: written by this user after validation)."""
        path = data["path"]
        return cls(settings=build(SettingsView, data["settings"]),
                   path=None if path is None else Path(path),
                   prices=PriceTable({k: Price(**v) for k, v in data["prices"].items()}))
