"""The reading commands' validated copy of the config (commands/config_copy.py): it gives
what a full load gives, follows every change to what it was made from, keeps no secret,
and is used only when it is this user's own file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from swarm_tui.commands.config_copy import read_view
from swarm_tui.core.plain import as_plain
from swarm_tui.errors import UserError
from swarm_tui.settings.loader import load_config
from swarm_tui.settings.view import ConfigView

WEBHOOK = "https://hooks.slack.com/services/T000/B000/very-secret-path"
ROUTING_KEY = "R0UT1NGKEY0123456789abcdef012345"

CONFIG = f"""
default_gateway = "a"
tasks_per_day = 9000
prices_file = "prices.toml"

[gateways.a]
base_url = "http://127.0.0.1:9/v1"
key_file = "~/keys/a.txt"
key_env = ["A_KEYS"]

[gateways.b]
base_url = "https://gw.example/v1/"
key_strategy = "proactive"

[sla]
p95_ms = 300
success_basis = "task"

[routing]
long_model = "kimi-k2.5"
fallback = {{ "kimi-k2.5" = ["deepseek-v3.2"] }}

[canary]
baseline = "a"
candidate = "b"
stages = [10, 50, 100]
bake = ["30m", "1h", "2h"]
mode = "auto"
interval = "5s"
[canary.gates]
p95_ms = 320
max_p95_ratio = 1.2

[prices."house-model"]
input = 0.5
output = 1.5

[[alerts.webhooks]]
name = "oncall"
url = "{WEBHOOK}"
format = "pagerduty"
routing_key = "{ROUTING_KEY}"
"""

PRICES = """
[models."house-model-2"]
input = 1.0
output = 2.0
source = "test"
"""


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    (tmp_path / "prices.toml").write_text(PRICES)
    monkeypatch.chdir(tmp_path)
    return path


def _copies() -> list[Path]:
    return sorted((Path(os.environ["XDG_CACHE_HOME"]) / "swarm-tui" / "config").glob("*.json"))


def test_the_copy_gives_what_a_full_load_gives(config: Path):
    full = as_plain(ConfigView.of(load_config(str(config))).to_plain())
    first = read_view(str(config))   # a full load, kept
    assert len(_copies()) == 1
    again = read_view(str(config))   # from the copy
    assert as_plain(first.to_plain()) == full == as_plain(again.to_plain())
    # the same typed objects, not dicts: what the commands call works
    assert again.settings.canary is not None and again.settings.canary.bake_s(1) == 3600.0
    assert again.settings.canary.name == "a->b"
    assert again.settings.gateways["a"].key_file == Path("~/keys/a.txt")
    assert again.settings.gateways["b"].base_url == "https://gw.example/v1"
    assert again.prices.cost("house-model", 1_000_000, 0) == 0.5
    assert again.prices.cost("house-model-2", 0, 1_000_000) == 2.0
    assert again.settings.sla.success_basis == "task" and again.settings.tasks_per_day == 9000


def test_the_copy_keeps_no_secret(config: Path):
    read_view(str(config))
    (copy,) = _copies()
    text = copy.read_text()
    assert WEBHOOK not in text and "very-secret" not in text and ROUTING_KEY not in text
    assert os.stat(copy).st_mode & 0o077 == 0
    assert os.stat(copy.parent).st_mode & 0o777 == 0o700


def test_every_change_to_what_it_was_made_from_is_followed(config: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    assert read_view(str(config)).settings.sla.p95_ms == 300
    config.write_text(CONFIG.replace("p95_ms = 300", "p95_ms = 280"))
    assert read_view(str(config)).settings.sla.p95_ms == 280  # the file's bytes
    monkeypatch.setenv("SWARM_TUI__SLA__P95_MS", "250")
    assert read_view(str(config)).settings.sla.p95_ms == 250  # the environment
    monkeypatch.delenv("SWARM_TUI__SLA__P95_MS")
    assert read_view(str(config)).settings.sla.p95_ms == 280
    (config.parent / "prices.toml").write_text(PRICES.replace("output = 2.0", "output = 4.0"))
    assert read_view(str(config)).prices.cost("house-model-2", 0, 1_000_000) == 4.0
    (config.parent / "prices.toml").unlink()  # the price file it read is gone: the full
    with pytest.raises(UserError, match=r"prices\.toml: file not found"):  # load says so
        read_view(str(config))


def test_a_broken_config_is_never_answered_from_an_older_copy(config: Path):
    read_view(str(config))
    config.write_text(CONFIG.replace('mode = "auto"', 'mode = "sometimes"'))
    with pytest.raises(UserError, match=r"canary\.mode"):
        read_view(str(config))
    config.unlink()
    with pytest.raises(UserError, match="file not found"):
        read_view(str(config))


def test_a_torn_or_foreign_copy_is_not_used(config: Path):
    read_view(str(config))
    (copy,) = _copies()
    copy.write_text('{"deps": {}, "view": {"settings": {"sla": {"p95_ms": 1}')  # torn
    assert read_view(str(config)).settings.sla.p95_ms == 300
    (copy,) = _copies()
    planted = copy.read_text().replace('"p95_ms": 300', '"p95_ms": 1')
    copy.unlink()
    target = copy.parent / "elsewhere.txt"
    target.write_text(planted)
    copy.symlink_to(target)  # a link where the copy goes: never followed
    assert read_view(str(config)).settings.sla.p95_ms == 300
    copy.unlink()
    copy.write_text(planted)
    os.chmod(copy.parent, 0o777)  # a folder others may write to: nothing in it is read
    try:
        assert read_view(str(config)).settings.sla.p95_ms == 300
    finally:
        os.chmod(copy.parent, 0o700)


def test_a_full_disk_leaves_no_copy_and_no_half_written_one(config: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    import errno
    import json

    from swarm_tui.commands import config_copy

    def half_then_full(data, f, **kw):  # the disk fills part-way through the copy
        f.write(json.dumps(data)[:100])
        f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(config_copy.json, "dump", half_then_full)
    assert read_view(str(config)).settings.sla.p95_ms == 300  # the command still answers
    folder = Path(os.environ["XDG_CACHE_HOME"]) / "swarm-tui" / "config"
    assert list(folder.iterdir()) == []


def test_an_edit_while_it_loads_leaves_no_copy_of_the_older_bytes(
        config: Path, monkeypatch: pytest.MonkeyPatch):
    """The copy's name says which bytes it was made from: a config or price file saved
    between the command's look and its load must not leave the older name on the newer
    settings (or the newer name on the older prices)."""
    from swarm_tui.settings import loader

    real = loader.load_config

    def edited_meanwhile(cli_path, flags=None):  # the engineer saves as the command starts
        config.write_text(CONFIG.replace("p95_ms = 300", "p95_ms = 290"))
        return real(cli_path, flags)

    monkeypatch.setattr(loader, "load_config", edited_meanwhile)
    assert read_view(str(config)).settings.sla.p95_ms == 290  # what it loaded
    assert _copies() == []  # but no copy named after the bytes it did not load
    monkeypatch.setattr(loader, "load_config", real)
    assert read_view(str(config)).settings.sla.p95_ms == 290
    assert len(_copies()) == 1
    prices = config.parent / "prices.toml"

    def prices_edited_meanwhile(cli_path, flags=None):
        cfg = real(cli_path, flags)
        prices.write_text(PRICES.replace("output = 2.0", "output = 3.0"))
        return cfg

    config.write_text(CONFIG.replace("p95_ms = 300", "p95_ms = 270"))
    monkeypatch.setattr(loader, "load_config", prices_edited_meanwhile)
    assert read_view(str(config)).prices.cost("house-model-2", 0, 1_000_000) == 2.0
    monkeypatch.setattr(loader, "load_config", real)
    # the copy was kept with the digest of the bytes it read: the new price file is seen
    assert read_view(str(config)).prices.cost("house-model-2", 0, 1_000_000) == 3.0
