"""Event-log lines fitted to a narrow panel: cut with `…` in their least important part.

A line is `   12.3s RETRY  demo-00168 #1 rate_limited 429 on sk-…9f12#7728d7: other key
+0.00s`. At 80 columns the log panel is about 45 wide, and a plain cut lost exactly what
on-call reads it for: the key and the wait. Kept, in order: the time, the tag, the task,
the error class and status, the key's fingerprint (its hash part, which the keys panel
also shows), the wait; the free text goes first.
"""

from __future__ import annotations

import re

_HEAD = re.compile(r"(?P<pad>\s*)(?P<time>\S+s) (?P<tag>\S+)\s+(?P<rest>.*)$")
# Every line's time is right-aligned (`{:7.1f}s`, 8 cells) so the tags line up. A narrow
# panel (80 columns: 52) has no cells for that padding: there every line goes without it,
# fitted or not — fitted lines alone had, and stood 3-4 cells left of the lines around
# them. Tags then line up among times of as many digits (a run's 10th to 99th second).
NARROW = 64
_FP = re.compile(r"\S{2,3}…\S{4}(#[0-9a-f]{6})")   # sk-…9f12#7728d7 → #7728d7
_WAIT = re.compile(r"\s(\+\d+(?:\.\d+)?s)$")
# applied one at a time, until the line fits: each says the same in fewer cells
_SHORTER = (
    (_FP, r"\1"),
    (re.compile(r" on (#[0-9a-f]{6}): other key \+0(?:\.0+)?s$"), r" \1→other"),
    (re.compile(r" on (#[0-9a-f]{6})"), r" \1"),
    (re.compile(r"\brate_limited 429\b"), "rate_limited"),
    (re.compile(r" \(~[\d,]+(?: tokens)?/min\)"), ""),
    (re.compile(r", then ≤ [\d.]+ calls/s"), ""),
    (re.compile(r" key (#[0-9a-f]{6})"), r" \1"),
    (re.compile(r"token quota spent: next call in"), "no tokens:"),
    (re.compile(r"quota spent: next call in"), "no quota:"),
    (re.compile(r"429 storm: cooling"), "storm: cool"),
    (re.compile(r"\b(kimi|deepseek|gpt|claude|gemini)-[\w.-]+"), r"\1"),
)


def fit_line(line: str, width: int) -> str:
    """`line` if it fits in `width` cells, else the same line made to fit, ending in …
    where text was cut (never cut inside the time, tag, key hash or wait)."""
    if width <= 0 or (len(line) <= width and width >= NARROW):
        return line
    m = _HEAD.match(line)
    if m is None:
        return line if len(line) <= width else line[: max(0, width - 1)] + "…"
    pad = "" if width < NARROW else m["pad"]
    head = f"{pad}{m['time']} {m['tag']:<6} "
    rest = m["rest"].rstrip()
    if len(head) + len(rest) <= width:
        return head + rest
    for pattern, shorter in _SHORTER:
        rest = pattern.sub(shorter, rest)
        if len(head) + len(rest) <= width:
            return head + rest
    tail = ""
    w = _WAIT.search(rest)
    if w is not None:
        rest, tail = rest[: w.start()], " " + w.group(1)
    if len(head) + len(rest) + len(tail) <= width:
        return head + rest + tail
    room = width - len(head) - len(tail) - 1
    if room < 1:
        return (head + rest)[: max(0, width - 1)] + "…"
    return head + rest[:room].rstrip() + "…" + tail
