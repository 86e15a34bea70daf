"""Themes as data: TOML files shipped in the top-level themes/ folder (installed as
the data package swarm_tui.themes) plus the user's config dir."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from textual.theme import Theme

from swarm_tui.errors import UserError
from swarm_tui.paths import user_theme_dir
from swarm_tui.settings.sections import format_validation_error

_FIELDS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground",
           "background", "surface", "panel", "boost")


class ThemeFile(BaseModel):
    """One theme's TOML file: Textual's colour names, `dark`, `ansi` (a 16-colour theme
    for bastion terminals) and extra CSS `variables`."""

    model_config = ConfigDict(extra="forbid")

    name: str
    primary: str
    secondary: str | None = None
    warning: str | None = None
    error: str | None = None
    success: str | None = None
    accent: str | None = None
    foreground: str | None = None
    background: str | None = None
    surface: str | None = None
    panel: str | None = None
    boost: str | None = None
    dark: bool = True
    ansi: bool = False
    variables: dict[str, str] = Field(default_factory=dict)

    def theme(self) -> Theme:
        variables = dict(self.variables)
        if self.ansi:
            # Textual's own stylesheets use $ansi-background etc., which only its built-in
            # ANSI themes define: without them the real app dies on its first frame (a
            # run_test() snapshot never notices). Start from those, ours on top.
            from textual.theme import BUILTIN_THEMES

            base = BUILTIN_THEMES["ansi-dark" if self.dark else "ansi-light"].variables
            variables = {**base, **variables}
        colours = {k: getattr(self, k) for k in _FIELDS if getattr(self, k) is not None}
        return Theme(name=self.name, dark=self.dark, ansi=self.ansi, variables=variables,
                     **colours)


def _read(text: str, place: str) -> Theme:
    try:
        return ThemeFile.model_validate(tomllib.loads(text)).theme()
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{place}: invalid TOML: {e}") from None
    except ValidationError as e:
        raise UserError(format_validation_error(place, e)) from None


def load_themes_reporting(extra_dir: Path | None = None
                          ) -> tuple[dict[str, Theme], list[str]]:
    """The shipped themes and the user's; a user theme that does not load is skipped and
    said (one line each), never the end of the console."""
    themes: dict[str, Theme] = {}
    shipped = resources.files("swarm_tui.themes")
    for entry in sorted(shipped.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            t = _read(entry.read_text("utf-8"), f"theme {entry.name}")
            themes[t.name] = t
    problems: list[str] = []
    folder = extra_dir or user_theme_dir()
    if folder.is_dir():
        for path in sorted(folder.glob("*.toml")):
            try:
                t = _read(path.read_text("utf-8"), f"theme {path}")
            except (OSError, UnicodeDecodeError) as e:
                problems.append(f"theme {path}: skipped, cannot read: {e}")
                continue
            except UserError as e:
                problems.append(f"{e} (skipped)")
                continue
            themes[t.name] = t
    return themes, problems


def load_themes(extra_dir: Path | None = None) -> dict[str, Theme]:
    return load_themes_reporting(extra_dir)[0]
