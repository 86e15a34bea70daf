"""The garbage collector while a command starts.

Starting is importing: modules, classes and functions that live as long as the process,
which each young-generation collection walks and keeps. A reading command made ~25 of
them on its way to its first query, 2–4 ms of a ~60 ms start (issue 34: `report last`
starts in ≤ 5× `python -c pass`). The young generation's threshold is raised before the
command line is imported; a command that stays (a run, a console, a worker) gets the
collector as it was once its word is known, and a run or a console then sets the swarm's
own (runtime.py). A command that reads or writes some rows and ends frees what it
allocates by reference counts; a cycle still meets a collection every 50,000 allocations.
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
