"""A moment of a run, written as `replay --at` takes it and a pager shows it."""

from __future__ import annotations

import time


def iso(t: float) -> str:
    """UTC, to the second: `2026-12-05T14:03:20Z`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def replay_command(run_id: str, at: float) -> str:
    """The command that opens the console at that moment of the run."""
    return f"swarm-tui replay {run_id} --at {iso(at)}"
