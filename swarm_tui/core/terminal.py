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
    # Textual draws on standard error and reads keys from standard input (standard output
    # may go to a file: the summary a console run prints at its end)
    if not (sys.__stdin__ is not None and sys.__stdin__.isatty()
            and sys.__stderr__ is not None and sys.__stderr__.isatty()):
        why = "its keys come from standard input and it draws on standard error: here one "\
              "of them is not a terminal"
    elif os.environ.get("TERM") == "dumb":
        why = "TERM=dumb here draws nothing"
    else:
        return None
    return (f"the console needs a terminal ({why}): `swarm-tui runs` and `report RUN` print "
            "text, `run --headless` runs without a screen, `watch --headless --metrics-port N` "
            "follows a run without one")
