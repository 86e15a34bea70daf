"""API keys: fingerprints and redaction. A key is never shown, stored or logged."""

from __future__ import annotations

import os
import re
import stat
import unicodedata
from pathlib import Path

from swarm_tui.errors import UserError

# Anything that looks like a bearer secret (sk-..., long tokens) in gateway text.
_SECRETISH = re.compile(r"\b(?:sk|pk|key|rk)[-_][A-Za-z0-9_\-]{6,}|\b[A-Za-z0-9_\-]{32,}\b")


def fingerprint(key: str) -> str:
    """`sk-…a1b2#3f9c1e`: a short prefix, the last 4 and a hash; reveals at most 7 chars.

    Short keys show only the hash, since prefix + suffix would be most of the key.
    """
    from swarm_tui.digest import sha256_hex

    digest = sha256_hex(key.encode())[:6]
    if len(key) < 20:
        return f"key#{digest}"
    prefix = key[:3]
    return f"{prefix}…{key[-4:]}#{digest}"


def redact(text: str, keys: list[str] | tuple[str, ...] = ()) -> str:
    """Replace known keys by their fingerprint and mask anything secret-shaped."""
    for key in keys:
        if key and key in text:
            text = text.replace(key, fingerprint(key))
    return _SECRETISH.sub(lambda m: _mask(m.group(0)), text)


def _mask(token: str) -> str:
    return f"{token[:3]}…[redacted]"


def key_problem(key: str) -> str | None:
    """Why `key` cannot be an API key, naming the character and never the key: a key is
    printable ASCII (it travels in an HTTP header). A key pasted from a web page or a chat
    brings a zero-width space or a no-break space with it, a file saved by Notepad a BOM —
    each sent as is meant a 401 and a disabled key with nothing on screen saying why."""
    if len(key) < 8:
        return "too short to be an API key"
    for i, c in enumerate(key, start=1):
        if not "!" <= c <= "~":
            return (f"character {i} is U+{ord(c):04X} ({unicodedata.name(c, 'a control')}),"
                    " not printable ASCII: pasted from a page or a chat?")
    return None


def read_key_file(path: Path, insecure: bool = False) -> list[tuple[str, str | None]]:
    """One key per line, optional label after whitespace; `#` starts a comment.

    Refuses a file readable by group or others unless `insecure` (the caller warns).
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise UserError(f"key file {path}: not found") from None
    except OSError as e:
        raise UserError(f"key file {path}: cannot read: {e.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO) and not insecure:
        raise UserError(
            f"key file {path}: readable by group/others (mode {stat.S_IMODE(mode):o}); "
            "run `chmod 600` on it, or pass --insecure-key-file"
        )
    try:
        text = path.read_text("utf-8-sig")  # a BOM (Notepad) is not part of the first key
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"key file {path}: cannot read: {type(e).__name__}") from None
    keys: list[tuple[str, str | None]] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        # split at ASCII blanks only: a no-break space pasted inside a key is part of it
        # (and refused below), not the start of a label after a truncated key
        parts = re.split(r"[ \t]+", line, maxsplit=1)
        problem = key_problem(parts[0])
        if problem is not None:
            raise UserError(f"key file {path}:{n}: {problem}")
        keys.append((parts[0], parts[1] if len(parts) > 1 else None))
    return keys


def keys_from_env(names: list[str]) -> list[tuple[str, str | None]]:
    """Each variable may hold several comma-separated keys; the label is the variable name."""
    out: list[tuple[str, str | None]] = []
    for name in names:
        for k in os.environ.get(name, "").split(","):
            if k.strip():
                problem = key_problem(k.strip())
                if problem is not None:
                    raise UserError(f"${name}: {problem}")
                out.append((k.strip(), name))
    return out
