"""A moment of a run, written as `replay --at` takes it and a pager shows it."""

from __future__ import annotations

import math
import re
import time
from urllib.parse import quote

# what a served moment's path may carry (commands/serve.py checks it again before it runs
# anything): a run id, and a TIME as `replay --at` takes it — never an option's dash first
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
AT = re.compile(r"[A-Za-z0-9+][A-Za-z0-9:+._-]{0,63}")


def iso(t: float) -> str:
    """UTC, to the second: `2026-12-05T14:03:20Z`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def moment_iso(t: float) -> str:
    """UTC to the millisecond, rounded up: `2026-12-05T14:03:20.714Z` for 20.7131. What a
    page or a moment's list gives to paste: the moment it opens includes what happened at
    `t` (a replay shows what happened by then). To the second, a breach paged at 20.7
    opened at 20.0, before it — and two moments of one second read the same."""
    ms = math.ceil(t * 1000)
    return f"{iso(ms // 1000)[:-1]}.{ms % 1000:03d}Z"


def replay_command(run_id: str, at: float) -> str:
    """The command that opens the console at that moment of the run."""
    return f"swarm-tui replay {run_id} --at {moment_iso(at)}"


def moment_link(console_url: str, run_id: str, at: float) -> str:
    """The served console at that moment (`swarm-tui serve`'s /at/RUN/TIME)."""
    return f"{console_url}/at/{quote(run_id, safe='')}/{quote(moment_iso(at), safe='')}"


def moments_text(run_id: str, started_at: float, moments: list[tuple[float, str]]) -> str:
    """A run's notable moments for `report` and `runs --moments`, each with its command."""
    from swarm_tui.core import fmt

    if not moments:
        return ""
    lines = ["notable moments (open one: the command beside it)"]
    for at, what in moments:
        offset = "+" + fmt.duration(at - started_at)
        lines.append(f"  {offset:<9} {what:<28} {replay_command(run_id, at)}")
    return "\n".join(lines)
