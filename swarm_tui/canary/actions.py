"""The names of the actions that move a canary, in the order the command line lists them.

Apart from state.py (which says when each is allowed): `swarm-tui --help` builds the
`canary` parser from them without the canary's record types (issue 34)."""

from __future__ import annotations

PROMOTE, PROMOTE_FULL, PAUSE, RESUME, ABORT, SET, RETRY = (
    "promote", "promote-full", "pause", "resume", "abort", "set", "retry")
ACTIONS = (PROMOTE, PROMOTE_FULL, PAUSE, RESUME, ABORT, SET, RETRY)
