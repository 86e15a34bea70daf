"""The user's folders as swarm-tui finds them without platformdirs (paths.py, issue 34's
start) are platformdirs' own, under every environment tried here; and the digest helper's
SHA-256 is hashlib's."""

from __future__ import annotations

import hashlib
import sys

import platformdirs
import pytest

from swarm_tui import paths
from swarm_tui.digest import sha256, sha256_hex

ASK = {"config": platformdirs.user_config_path, "data": platformdirs.user_data_path,
       "state": platformdirs.user_state_path, "cache": platformdirs.user_cache_path}
VARS = {"config": "XDG_CONFIG_HOME", "data": "XDG_DATA_HOME", "state": "XDG_STATE_HOME",
        "cache": "XDG_CACHE_HOME"}


@pytest.mark.parametrize("kind", sorted(ASK))
@pytest.mark.parametrize("home", ["/home/oncall", "/home/oncall/", "relative/home", None])
@pytest.mark.parametrize("xdg", [None, "", "/srv/xdg", "/srv/xdg/", "rel/xdg", "//twice"])
def test_each_folder_is_the_one_platformdirs_names(monkeypatch, kind, home, xdg):
    for var in VARS.values():
        monkeypatch.delenv(var, raising=False)
    if home is None:
        monkeypatch.delenv("HOME", raising=False)
    else:
        monkeypatch.setenv("HOME", home)
    if xdg is not None:
        monkeypatch.setenv(VARS[kind], xdg)
    assert paths.user_dir(kind) == ASK[kind](paths.APP_NAME)


def test_the_xdg_rule_is_ours_only_on_linux(monkeypatch):
    monkeypatch.setenv("HOME", "/home/oncall")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    expected = "/home/oncall/.cache/swarm-tui" if sys.platform == "linux" else None
    got = paths._xdg("cache")
    assert (None if got is None else str(got)) == expected
    monkeypatch.setattr(paths.sys, "platform", "darwin")
    assert paths._xdg("cache") is None  # another system: platformdirs answers


@pytest.mark.parametrize("data", [b"", b"abc", "키 설정 한국어".encode(), bytes(range(256)) * 300])
def test_the_digest_is_hashlibs_sha256(data):
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()
    h = sha256()
    h.update(data[:7])
    h.update(data[7:])
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()
