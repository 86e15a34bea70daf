"""The garbage collector while a command starts.

Starting is importing: modules, classes and functions that live as long as the process,
which each young-generation collection walks and keeps. A reading command made ~25 of
them on its way to its first query, 2–4 ms of a ~60 ms start (issue 34: `report last`
starts in ≤ 5× `python -c pass`). The young generation's threshold is raised before the
command line is imported; a command that stays (a run, a console, a worker) gets the
collector as it was once its word is known, and a run or a console then sets the swarm's
own (runtime.py). A command that reads or writes some rows and ends frees what it
allocates by reference counts; a cycle still meets a collection every 50,000 allocations.

Such a command also ends without the interpreter's last full collection, which walked
every object the imports made (~6 ms of a ~50 ms `report last`): what is left is frozen
(gc.freeze) as the command returns, and the exit frees it — the technique Instagram
described for its web workers (atexit + os._exit), kept gentler here: the exit still runs
its atexit handlers, flushes and closes (a command's files and connections are closed in
`with` blocks before it returns).
"""

from __future__ import annotations

import gc

USUAL = gc.get_threshold()
STARTING = (max(USUAL[0], 50_000), *USUAL[1:])


def while_starting() -> None:
    if gc.get_threshold() == USUAL:  # (never over a threshold someone else chose)
        gc.set_threshold(*STARTING)


def as_usual() -> None:
    if gc.get_threshold() == STARTING:
        gc.set_threshold(*USUAL)


def ending() -> None:
    """The command returned or exited; a command that kept the start-up threshold ends
    without the last collection's walk (the module's docstring says why)."""
    if gc.get_threshold() == STARTING:
        gc.freeze()
