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
