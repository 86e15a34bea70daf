from __future__ import annotations

import os

import pytest

from swarm_tui.errors import UserError
from swarm_tui.gateway.keys import fingerprint, keys_from_env, read_key_file, redact

KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"


def test_fingerprint_reveals_at_most_seven_characters():
    fp = fingerprint(KEY)
    assert fp.startswith("sk-…6789#") and len(fp) == len("sk-…6789#") + 6
    assert fingerprint("short-key-123") .startswith("key#")
    assert fingerprint(KEY) == fp and fingerprint(KEY + "x") != fp


def test_redact_known_and_secret_shaped_keys():
    text = f"Incorrect API key provided: {KEY}. Also sk-live-zzzzzzzzzzzzzz leaked"
    out = redact(text, (KEY,))
    assert KEY not in out and "zzzzzzzzzzzzzz" not in out
    assert fingerprint(KEY) in out


def test_key_file_permissions_and_labels(tmp_path):
    f = tmp_path / "keys"
    f.write_text(f"# prod keys\n{KEY} primary\n\nsk-second-key-0123456789abcdef\n")
    os.chmod(f, 0o644)
    with pytest.raises(UserError, match="readable by group/others"):
        read_key_file(f)
    assert len(read_key_file(f, insecure=True)) == 2
    os.chmod(f, 0o600)
    assert read_key_file(f) == [(KEY, "primary"), ("sk-second-key-0123456789abcdef", None)]
    bad = tmp_path / "bad"
    bad.write_text("abc\n")
    os.chmod(bad, 0o600)
    with pytest.raises(UserError, match=r"bad:1: too short"):
        read_key_file(bad)
    with pytest.raises(UserError, match="not found"):
        read_key_file(tmp_path / "missing")


def test_keys_from_env_comma_separated(monkeypatch):
    monkeypatch.setenv("K1", f"{KEY}, sk-other-0000000000000000")
    assert [k for k, _ in keys_from_env(["K1", "UNSET_VAR"])] == [KEY, "sk-other-0000000000000000"]
