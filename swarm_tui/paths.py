"""Where swarm-tui keeps things on this machine — the one module that asks platformdirs.

config: ~/.config/swarm-tui/config.toml (SWARM_TUI_CONFIG / --config override it)
themes: ~/.config/swarm-tui/themes/*.toml
runs:   ~/.local/share/swarm-tui/runs.db (SWARM_TUI_DB / --db override it)
screenshots from the console: the user's downloads folder (as Textual saves them)
"""

from __future__ import annotations

from pathlib import Path

import platformdirs

APP_NAME = "swarm-tui"


def config_dir() -> Path:
    return platformdirs.user_config_path(APP_NAME)


def default_config_path() -> Path:
    return config_dir() / "config.toml"


def user_theme_dir() -> Path:
    return config_dir() / "themes"


def default_db_path() -> Path:
    return platformdirs.user_data_path(APP_NAME) / "runs.db"


def downloads_dir() -> Path:
    return platformdirs.user_downloads_path()
