"""Whether output goes to a terminal that draws: a tty whose TERM is not `dumb` (Emacs'
shell buffer, some CI consoles). There a progress bar's control sequences and the console's
screen arrive as text, and the console waits for keys that never come."""

from __future__ import annotations

import os
from typing import TextIO


def draws(stream: TextIO) -> bool:
    return stream.isatty() and os.environ.get("TERM") != "dumb"


def console_refusal() -> str | None:
    """Why the console cannot start here (None: it can): a `watch` under nohup or in a
    pipe filled its log with control sequences and hung until killed."""
    import sys

    if os.environ.get("TEXTUAL_DRIVER"):  # a driver of its own: `serve`'s browser tab
        return None
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        why = "standard input and output here are not one"
    elif os.environ.get("TERM") == "dumb":
        why = "TERM=dumb here draws nothing"
    else:
        return None
    return (f"the console needs a terminal ({why}): `swarm-tui runs` and `report RUN` print "
            "text, `run --headless` runs without a screen, `watch --headless --metrics-port N` "
            "follows a run without one")
