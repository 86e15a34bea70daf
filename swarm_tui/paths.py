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
import sys
from pathlib import Path

APP_NAME = "swarm-tui"

# platformdirs costs ~5 ms of a reading command's ~50 ms start (it brings tempfile, shutil
# and compiles its regexes; issue 34). On Linux the four folders below are the XDG rule,
# which `_xdg` follows exactly as platformdirs does (a unit test holds them equal under
# every environment it tries); anything else — another system, a HOME that is not an
# absolute path — asks platformdirs itself.
_XDG = {"config": ("XDG_CONFIG_HOME", ".config"), "data": ("XDG_DATA_HOME", ".local/share"),
        "state": ("XDG_STATE_HOME", ".local/state"), "cache": ("XDG_CACHE_HOME", ".cache")}


def _xdg(kind: str) -> Path | None:
    """The user's `kind` folder for this program by the XDG rule; None: ask platformdirs."""
    if sys.platform != "linux":
        return None
    var, default = _XDG[kind]
    base = os.environ.get(var, "")
    if os.path.isabs(base):
        return Path(base, APP_NAME)
    home = os.environ.get("HOME", "")
    return Path(home, default, APP_NAME) if os.path.isabs(home) else None


def _asked(kind: str) -> Path:
    import platformdirs

    ask = {"config": platformdirs.user_config_path, "data": platformdirs.user_data_path,
           "state": platformdirs.user_state_path, "cache": platformdirs.user_cache_path}
    return ask[kind](APP_NAME)


def user_dir(kind: str) -> Path:
    """`kind`: config, data, state or cache."""
    return _xdg(kind) or _asked(kind)


def config_dir() -> Path:
    return user_dir("config")


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
    return user_dir("data") / "runs.db"


def state_dir() -> Path:
    """A PostgreSQL database's files on this host: executor locks, unsaved-row journals."""
    return user_dir("state")


def cache_dir() -> Path:
    """Copies that can be made again: the validated config the reading commands use."""
    return user_dir("cache")


def downloads_dir() -> Path:
    import platformdirs

    return platformdirs.user_downloads_path()
