"""Themes as data: TOML files shipped in swarm_tui/themes/ plus the user's config dir."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import platformdirs
from textual.theme import Theme

from swarm_tui.errors import UserError

_FIELDS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground",
           "background", "surface", "panel", "boost")


def _theme(data: dict, place: str) -> Theme:
    unknown = set(data) - {*_FIELDS, "name", "dark", "ansi", "variables"}
    if unknown:
        raise UserError(f"{place}: unknown key(s) {', '.join(sorted(unknown))}")
    if not isinstance(data.get("name"), str) or not isinstance(data.get("primary"), str):
        raise UserError(f"{place}: needs string keys 'name' and 'primary'")
    dark, ansi = bool(data.get("dark", True)), bool(data.get("ansi", False))
    variables = {str(k): str(v) for k, v in (data.get("variables") or {}).items()}
    if ansi:
        # Textual's own stylesheets use $ansi-background etc., which only its built-in
        # ANSI themes define: without them the real app dies on its first frame (a
        # run_test() snapshot never notices). Start from those, ours on top.
        from textual.theme import BUILTIN_THEMES

        base = BUILTIN_THEMES["ansi-dark" if dark else "ansi-light"].variables
        variables = {**base, **variables}
    return Theme(
        name=data["name"], dark=dark, ansi=ansi, variables=variables,
        **{k: data[k] for k in _FIELDS if k in data},
    )


def user_theme_dir() -> Path:
    return platformdirs.user_config_path("swarm-tui") / "themes"


def load_themes(extra_dir: Path | None = None) -> dict[str, Theme]:
    themes: dict[str, Theme] = {}
    shipped = resources.files("swarm_tui").joinpath("themes")
    for entry in sorted(shipped.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            t = _theme(tomllib.loads(entry.read_text("utf-8")), f"theme {entry.name}")
            themes[t.name] = t
    folder = extra_dir or user_theme_dir()
    if folder.is_dir():
        for path in sorted(folder.glob("*.toml")):
            try:
                data = tomllib.loads(path.read_text("utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
                raise UserError(f"theme {path}: cannot read: {e}") from None
            t = _theme(data, f"theme {path}")
            themes[t.name] = t
    return themes
