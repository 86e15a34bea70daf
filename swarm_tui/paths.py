"""Where swarm-tui keeps things on this machine — the one module that asks platformdirs.

config: ~/.config/swarm-tui/config.toml (SWARM_TUI_CONFIG / --config override it)
themes: ~/.config/swarm-tui/themes/*.toml
runs:   ~/.local/share/swarm-tui/runs.db (SWARM_TUI_DB / --db override it)
state:  ~/.local/state/swarm-tui/pg-<tag>/ (a PostgreSQL store's locks and journals)
cache:  ~/.cache/swarm-tui/config/ (validated copies of the config, for reading commands)
screenshots from the console: the user's downloads folder (as Textual saves them)
"""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "swarm-tui"

# platformdirs is imported where asked (~4 ms: it brings tempfile and shutil): a command
# given --db or SWARM_TUI_DB never asks it (issue 34)


def config_dir() -> Path:
    import platformdirs

    return platformdirs.user_config_path(APP_NAME)


def default_config_path() -> Path:
    return config_dir() / "config.toml"


def config_file(cli_path: str | None) -> Path | None:
    """The config file to read: --config, else SWARM_TUI_CONFIG (either must exist: the
    loader says so), else the default one if it exists; None: no file at all."""
    if cli_path:
        return Path(cli_path).expanduser()
    env = os.environ.get("SWARM_TUI_CONFIG")
    if env:
        return Path(env).expanduser()
    p = default_config_path()
    return p if p.exists() else None


def user_theme_dir() -> Path:
    return config_dir() / "themes"


def default_db_path() -> Path:
    import platformdirs

    return platformdirs.user_data_path(APP_NAME) / "runs.db"


def state_dir() -> Path:
    """A PostgreSQL database's files on this host: executor locks, unsaved-row journals."""
    import platformdirs

    return platformdirs.user_state_path(APP_NAME)


def cache_dir() -> Path:
    """Copies that can be made again: the validated config the reading commands use."""
    import platformdirs

    return platformdirs.user_cache_path(APP_NAME)


def downloads_dir() -> Path:
    import platformdirs

    return platformdirs.user_downloads_path()
