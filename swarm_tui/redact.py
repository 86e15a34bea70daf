"""What a secret looks like wherever it is kept or shown: a tag, never the value.

Config fields that carry a credential are serialized with these (settings/run_sections.py's
`SecretStrField`, settings/sections.py's `UrlField`): a model dumped as JSON — the run's
stored config, `--json`, an export — writes the tag, so a new secret-bearing field is safe
the moment it is typed so. In memory the value is whole.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit


def secret_tag(value: str) -> str:
    """A stable name for a secret (the same secret, the same tag): sha256's first 8."""
    from swarm_tui.digest import sha256_hex

    return f"<secret sha256:{sha256_hex(value.encode())[:8]}>"


def without_userinfo(url: str) -> str:
    """A URL with any `user:password@` replaced by `***@` (a gateway behind basic auth)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"***@{host}"))


def _tag_or_none(value: str | None) -> str | None:
    return None if value is None else secret_tag(value)



def scrub_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A stored config (JSON) written before these types: its secrets as they are now
    written (the migration that scrubs stored runs)."""
    for gw in (settings.get("gateways") or {}).values():
        if isinstance(gw, dict) and isinstance(gw.get("base_url"), str):
            gw["base_url"] = without_userinfo(gw["base_url"])
    for hook in (settings.get("alerts") or {}).get("webhooks") or []:
        url = hook.get("url") if isinstance(hook, dict) else None
        if isinstance(url, str) and not url.startswith("<secret "):
            hook["url"] = secret_tag(url)
    tele = settings.get("telemetry") or {}
    if isinstance(tele.get("otlp_endpoint"), str):
        tele["otlp_endpoint"] = without_userinfo(tele["otlp_endpoint"])
    return settings
