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


@pytest.mark.parametrize(("pasted", "named"), [
    ("\u200b", "U+200B (ZERO WIDTH SPACE)"), ("\u00a0", "U+00A0 (NO-BREAK SPACE)"),
    ("\ufeff", "U+FEFF (ZERO WIDTH NO-BREAK SPACE)"), ("é", "U+00E9"), ("\x07", "U+0007")])
def test_a_key_with_a_pasted_character_is_refused_by_name_never_shown(tmp_path, monkeypatch,
                                                                      pasted, named):
    """A key copied from a web page or a chat brings a character the gateway's header
    cannot hold as part of the key: a 401 and a disabled key, with nothing saying why."""
    bad = KEY[:10] + pasted + KEY[10:]
    f = tmp_path / "k.keys"
    f.write_text(f"{KEY} ok\n{bad} pasted\n", encoding="utf-8")
    os.chmod(f, 0o600)
    with pytest.raises(UserError) as e:
        read_key_file(f)
    assert f"{f}:2: character 11 is {named}" in str(e.value) and KEY[:10] not in str(e.value)
    monkeypatch.setenv("PASTED_KEYS", f"{KEY},{bad}")
    with pytest.raises(UserError, match=r"\$PASTED_KEYS: character 11 is U\+") as e:
        keys_from_env(["PASTED_KEYS"])
    assert KEY[:10] not in str(e.value)


def test_a_key_file_saved_by_notepad_reads_as_its_keys(tmp_path):
    f = tmp_path / "k.keys"
    f.write_bytes(b"\xef\xbb\xbf" + KEY.encode() + b" first\r\n" + KEY[::-1].encode() + b"\r\n")
    os.chmod(f, 0o600)
    assert read_key_file(f) == [(KEY, "first"), (KEY[::-1], None)]
