"""Errors that end a command with one line for the user and a documented exit code."""

from __future__ import annotations

# Exit codes (documented in the README).
EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_SLA_BREACHED = 3
EXIT_BUDGET_STOPPED = 4
EXIT_HANGUP = 129  # the console's terminal hung up (SSH dropped): run cancelled, resumable
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM / quit or cancel in the console: resumable


class UserError(Exception):
    """Bad input the user can fix: config, workload, key file, database, gateway.

    The message is shown as a single line; it must name the place (file:line,
    config key, URL) and never contain a secret.
    """

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code
