"""The config as the reading commands see it (`report`, `cost`, `keys`, `canary`), from a
validated copy when nothing it was made from has changed.

Validating the TOML file needs pydantic and pydantic-settings: ~110 ms of imports before a
command that prints one stored row could answer (issue 34 asks ≤ 5× `python -c pass`).
So a full load keeps what these commands read (settings/view.py: no webhook URL, no
secret) in `~/.cache/swarm-tui/config/`, keyed by everything the load depends on: the
config file's bytes and path, the SWARM_TUI__* environment, the working folder (a relative
price file), this program's version and its config code; the price file it read is
checked by its bytes at every use. Anything different, unreadable or not this user's own
file: a full load, with its one-line errors, as before. Tokenizers are `run`'s concern
(checked there); reading commands never count tokens.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import swarm_tui
from swarm_tui.digest import sha256, sha256_hex
from swarm_tui.paths import cache_dir, config_file
from swarm_tui.settings.view import ConfigView
from swarm_tui.store.own_files import open_own, own_dir, why_not_own_dir

KEEP = 16  # copies kept (one per config file × environment in use); the oldest go first
# the code a copy's validation ran: a change to any of these is another config format
_CODE = ("settings/sections.py", "settings/run_sections.py", "settings/loader.py",
         "settings/view.py", "prices.py", "core/checks.py", "core/plain.py", "data/prices.toml")


def read_view(cli_path: str | None) -> ConfigView:
    """The validated config's view: from a matching copy, else loaded (and copied)."""
    path = config_file(cli_path)
    digest = None if path is None else _digest(path)
    if path is not None and digest is None:  # it cannot be read: the full load says why
        return _load(cli_path, None, None)
    copy = cache_dir() / "config" / f"{_key(path, digest)}.json"
    found = _read(copy)
    if found is not None:
        return found
    return _load(cli_path, copy, digest)


def _load(cli_path: str | None, copy: Path | None, digest: str | None) -> ConfigView:
    from swarm_tui.settings.loader import load_config

    cfg = load_config(cli_path)
    view = ConfigView.of(cfg)
    # kept only when the load read the bytes the copy's name says, and with the digest of
    # the price file's bytes it read (an edit during the load: no copy, the next load makes it)
    if copy is not None and cfg.file_digest == digest:
        deps = ({} if cfg.prices_file is None
                else {str(cfg.prices_file): cfg.prices.file_digest})
        _write(copy, {"deps": deps, "view": view.to_plain()})
    return view


def _key(path: Path | None, digest: str | None) -> str:
    """The copy's name: everything a full load of this config depends on."""
    root = Path(swarm_tui.__file__).parent
    stamps = []
    for rel in _CODE:
        try:
            st = os.stat(root / rel)
            stamps.append((rel, st.st_size, st.st_mtime_ns))
        except OSError:
            stamps.append((rel, -1, -1))
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("SWARM_TUI__"))
    h = sha256(json.dumps([swarm_tui.__version__, str(path), digest, os.getcwd(), env,
                                   stamps]).encode())
    return h.hexdigest()[:40]


def _digest(path: Path) -> str | None:
    try:
        return sha256_hex(path.read_bytes())
    except OSError:
        return None


def _read(copy: Path) -> ConfigView | None:
    try:
        if why_not_own_dir(os.lstat(copy.parent)) is not None:
            return None  # a folder others can write to: anything in it may be planted
        fd = open_own(copy, os.O_RDONLY)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read())
        if any(_digest(Path(p)) != d for p, d in data["deps"].items()):
            return None  # the price file changed since (or is gone: the load says so)
        return ConfigView.from_plain(data["view"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # a torn or older copy: made again


def _write(copy: Path, data: dict[str, Any]) -> None:
    """Best effort: a copy not written costs the next command a full load, nothing more."""
    tmp = copy.parent / f".{copy.name}.{os.getpid()}"
    made = False
    try:
        folder = own_dir(copy.parent, parents=True)
        fd = open_own(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        made = True
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
        os.replace(tmp, copy)
        copies = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in copies[:-KEEP]:
            with contextlib.suppress(OSError):
                old.unlink()
    except OSError:  # a full disk, a folder not ours: no copy, and no half-written one
        if made:
            with contextlib.suppress(OSError):
                tmp.unlink()
