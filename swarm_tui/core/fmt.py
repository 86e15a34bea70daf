"""How figures are written, everywhere: milliseconds, dollars, durations, counts.

One place, so the status bar, the headless line, `report`, the canary panel and the cost
view never disagree on a figure's shape.
"""

from __future__ import annotations


def ms(v: float | None, unit: bool = False) -> str:
    """`1,234` (or `1,234 ms`); `-` when there is no figure."""
    if v is None:
        return "-"
    return f"{v:,.0f} ms" if unit else f"{v:,.0f}"


def usd(v: float | None, digits: int = 4) -> str:
    """`$0.0123`; whole dollars from $100 up; `-` when unknown (unpriced is not $0)."""
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"${v:,.0f}"
    return f"${v:,.{digits}f}"


def pct(rate: float | None, digits: int = 1) -> str:
    """A rate in 0..1 as `99.4%`; `-` when there is none yet."""
    return "-" if rate is None else f"{rate * 100:.{digits}f}%"


def thousands(n: int) -> str:
    """`9,999`, then `12.3k`: token counts that fit a status bar."""
    return f"{n / 1000:,.1f}k" if n >= 10_000 else f"{n:,}"


def duration(seconds: float) -> str:
    """A timer: `4.2s` under 10 s, then `45s`, `3m07s`, `2h05m`."""
    if seconds < 10 and seconds != int(seconds):
        return f"{max(0.0, seconds):.1f}s"
    whole = max(0, int(seconds))
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def short_duration(seconds: float) -> str:
    """One unit, rounded, for a status line: `45s`, `12m`, `1.5h`."""
    seconds = max(0.0, seconds)
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    if seconds >= 60:
        return f"{seconds / 60:.0f}m"
    return f"{seconds:.0f}s"


def config_duration(seconds: float) -> str:
    """As a config file would say it: `30s`, `2m`, `24h`."""
    if seconds >= 3600:
        return f"{seconds / 3600:g}h"
    if seconds >= 60:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


# What a terminal would act on instead of show: C0 controls (ESC starts a sequence that
# can clear the screen, retitle the window or fake text), DEL, C1 (0x9b is CSI on 8-bit
# terminals) and the bidi overrides that reorder what is seen. Task ids are the
# workload's, error texts the gateway's, answers a model's: none of it is ours to let
# steer the on-call engineer's terminal.
_SHOWN = {c: 0x2400 + c for c in range(0x20)} | {0x7F: 0x2421}
_SHOWN |= {c: 0xFFFD for c in (*range(0x80, 0xA0), *range(0x202A, 0x202F),
                               *range(0x2066, 0x206A))}
_SHOWN_LINES = {c: r for c, r in _SHOWN.items() if c not in (0x09, 0x0A)}


def shown(text: str, *, lines: bool = False) -> str:
    """`text` as a terminal may receive it: each control character as its visible picture
    (`␛` for ESC, `␍` for CR), C1 and bidi controls as `�`; `lines`: newlines and tabs
    kept. Plain text (nearly all of it) is returned as it is."""
    if text.isprintable():
        return text
    if lines:
        return text.replace("\r\n", "\n").translate(_SHOWN_LINES)
    return text.translate(_SHOWN)


def whole(text: str) -> str:
    """`text` as UTF-8 can hold it. JSON lets a gateway write half a surrogate pair
    (`\\ud83d` with no low half, or the halves in two stream chunks): Python keeps it as
    is, and the first encode — token counting, the store — raised UnicodeEncodeError, so
    a paid answer ended as a cancelled task with no call on record. Pairs are joined, a
    lone half becomes U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def class_status(error_class: str | None, status: int | None) -> str:
    """A failed call as the log names it: `rate_limited 429`, or the class alone when the
    call had no status (no gap where it is absent)."""
    return f"{error_class} {status}" if status else str(error_class)
