"""A canary's state and the actions that move it: which are allowed when, and what they do.

Pure: no I/O, no clock (the record itself is core/canary.py's). The store applies these
under a compare-and-swap, so the CLI, a console and an auto-mode runner can all act on the
same canary.
"""

from __future__ import annotations

from swarm_tui.canary.actions import (
    ABORT,
    ACTIONS,
    PAUSE,
    PROMOTE,
    PROMOTE_FULL,
    RESUME,
    RETRY,
    SET,
)
from swarm_tui.core.canary import (
    ABORTED,
    COMPLETE,
    PAUSED,
    PROGRESSING,
    START,
    CanaryState,
    initial,
)
from swarm_tui.core.record import replace
from swarm_tui.errors import UserError

__all__ = ["ABORT", "ABORTED", "ACTIONS", "COMPLETE", "PAUSE", "PAUSED", "PROGRESSING", "PROMOTE",
           "PROMOTE_FULL", "RESUME", "RETRY", "SET", "START", "CanaryState", "initial"]

ALLOWED: dict[str, frozenset[str]] = {
    PROMOTE: frozenset({PROGRESSING, PAUSED}),
    PROMOTE_FULL: frozenset({PROGRESSING, PAUSED}),
    PAUSE: frozenset({PROGRESSING}),
    RESUME: frozenset({PAUSED}),
    # Also from complete: rolling a fully promoted gateway back is what on-call needs most.
    ABORT: frozenset({PROGRESSING, PAUSED, COMPLETE}),
    SET: frozenset({PROGRESSING, PAUSED, COMPLETE}),
    RETRY: frozenset({ABORTED}),
}


class ActionRefused(UserError):
    """An action not allowed in the canary's state, or a bad argument (exit 2)."""


def allowed_actions(status: str) -> list[str]:
    return [a for a in ACTIONS if status in ALLOWED[a]]


def parse_pct(arg: str | int | None) -> int:
    try:
        pct = int(str(arg).rstrip("%"))
    except ValueError:
        raise ActionRefused(f"canary set: '{arg}' is not a percentage (1-100)") from None
    if not 1 <= pct <= 100:
        raise ActionRefused(f"canary set: {pct} is outside 1-100 (use abort for 0 %)")
    return pct


def transition(state: CanaryState, action: str, arg: str | int | None, stages: list[int],
               now: float) -> CanaryState:
    """The state after `action`, or ActionRefused naming why not."""
    if action not in ALLOWED:
        raise ActionRefused(f"canary: unknown action '{action}' (one of {', '.join(ACTIONS)})")
    if state.status not in ALLOWED[action]:
        can = ", ".join(allowed_actions(state.status)) or "nothing"
        raise ActionRefused(f"canary {state.name}: cannot {action} while {state.status} "
                            f"at {state.pct} % (allowed: {can})")
    if action == PROMOTE:
        pct = state.next_pct(stages) or 100
        return _moved(state, pct, COMPLETE if pct == 100 else PROGRESSING, now)
    if action == PROMOTE_FULL:
        return _moved(state, 100, COMPLETE, now)
    if action == PAUSE:
        return replace(state, status=PAUSED, updated_at=now)
    if action == RESUME:
        # The analysis window keeps the stage's samples; the bake timer starts again.
        return replace(state, status=PROGRESSING, bake_started_at=now,
                                   passing_since=None, failures=0, updated_at=now)
    if action == ABORT:
        return _moved(state, 0, ABORTED, now)
    if action == SET:
        pct = parse_pct(arg)
        if pct == 100:
            status = COMPLETE
        else:
            status = PROGRESSING if state.status == COMPLETE else state.status
        return _moved(state, pct, status, now)
    # RETRY: start over at the first stage
    return _moved(state, stages[0], COMPLETE if stages[0] == 100 else PROGRESSING, now)


def _moved(state: CanaryState, pct: int, status: str, now: float) -> CanaryState:
    """A new percentage is a new stage: fresh analysis window, bake timer and counters."""
    return replace(state, pct=pct, status=status, updated_at=now,
                               stage_started_at=now, bake_started_at=now, passing_since=None,
                               failures=0)
