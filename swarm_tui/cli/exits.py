"""The one exit-code table for every way a run ends (README, Exit codes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarm_tui.errors import (
    EXIT_BUDGET_STOPPED,
    EXIT_HANGUP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SLA_BREACHED,
)

if TYPE_CHECKING:
    from swarm_tui.run.stored_run import Outcome


def exit_code(outcome: Outcome, console_code: int | None = None) -> int:
    """The one exit-code table (README, Exit codes) for every way a run ends: headless,
    or a console that was quit, hung up on, or left after the run ended."""
    from swarm_tui.core.states import RunStatus

    if console_code == EXIT_HANGUP or outcome.hung_up:
        return EXIT_HANGUP
    summary = outcome.summary
    if (console_code == EXIT_INTERRUPTED or outcome.interrupted
            or summary.status == RunStatus.CANCELLED):
        return EXIT_INTERRUPTED
    if summary.status == RunStatus.BUDGET_STOPPED:
        return EXIT_BUDGET_STOPPED
    if summary.sla is not None and (summary.sla.met or summary.sla.inconclusive):
        return EXIT_OK  # inconclusive: latency over the SLA while the client was the limit
    return EXIT_SLA_BREACHED
