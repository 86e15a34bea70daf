"""Command start (issue 34): each command's whole-process time against `python -c pass`,
median of 11, in the same run: as `python -m swarm_tui CMD`, and as the installed
`swarm-tui CMD` beside this Python when there is one. Uses the database named by
SWARM_TUI_DB (make one with a run first: `swarm-tui run --demo 100 --headless`).

    python bench/startup.py [ROUNDS]     (default 11)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# As installed: Python's compiled modules (.pyc) cached beside the source. With
# PYTHONDONTWRITEBYTECODE set (as on some build images) every start compiles every module
# of ours it imports again — ~25 ms more per command, a cost no installed copy pays.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

COMMANDS = (["--help"], ["runs"], ["report", "last"], ["keys", "list"], ["canary", "status"])


def _once_ms(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   env=ENV)
    return (time.perf_counter() - t0) * 1000


def medians_ms(argvs: dict[str, list[str]], n: int) -> dict[str, float]:
    """Each command once per round, round after round: a machine that slows down part-way
    slows the baseline and the commands alike (the ratio is what is compared)."""
    times: dict[str, list[float]] = {name: [] for name in argvs}
    for _ in range(n):
        for name, argv in argvs.items():
            times[name].append(_once_ms(argv))
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    # once each first: the .pyc written, the config's validated copy kept, as after an
    # install and a first use
    for cmd in COMMANDS:
        _once_ms([sys.executable, "-m", "swarm_tui", *cmd])
    argvs = {"python -c pass": [sys.executable, "-c", "pass"]}
    argvs.update({"python -m swarm_tui " + " ".join(cmd):
                  [sys.executable, "-m", "swarm_tui", *cmd] for cmd in COMMANDS})
    # what the user types: the installed entry point (no runpy, which `-m` imports)
    script = Path(sys.executable).parent / "swarm-tui"
    if script.exists():
        argvs.update({"swarm-tui " + " ".join(cmd): [str(script), *cmd] for cmd in COMMANDS})
    # what bounds a command that would validate the config itself: importing the config's
    # libraries alone, before any of ours
    floors = ("from pydantic import BaseModel", "import pydantic_settings",
              # the standard library a reading command cannot start without (the parser,
              # the database, records, paths, JSON): what is left of 5x for our own code
              "import argparse, sqlite3, json, pathlib, typing, datetime, enum",
              "import argparse, sqlite3, json, pathlib, typing, datetime, enum, dataclasses")
    argvs.update({f"floor: {code}": [sys.executable, "-c", code] for code in floors})
    ms = medians_ms(argvs, n)
    base = ms["python -c pass"]
    print(f"median of {n}, round-robin; python -c pass: {base:.0f} ms")
    width = max(map(len, ms))
    for name, value in ms.items():
        if name == "python -c pass":
            continue
        target = "" if name.startswith("floor") else "  (target <= 5x)"
        print(f"{name:<{width}} {value:6.0f} ms  {value / base:5.1f}x{target}")


if __name__ == "__main__":
    main()
