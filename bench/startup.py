"""Command start (issue 34): each command's whole-process time against `python -c pass`,
median of 11, in the same run. Uses the database named by SWARM_TUI_DB (make one with a
run first: `swarm-tui run --demo 100 --headless`).

    python bench/startup.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

# As installed: Python's compiled modules (.pyc) cached beside the source. With
# PYTHONDONTWRITEBYTECODE set (as on some build images) every start compiles every module
# of ours it imports again — ~25 ms more per command, a cost no installed copy pays.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

COMMANDS = (["--help"], ["runs"], ["report", "last"], ["keys", "list"], ["canary", "status"])


def median_ms(argv: list[str], n: int = 11) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                       env=ENV)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    for cmd in COMMANDS:  # once each first: the .pyc written, as after an install
        subprocess.run([sys.executable, "-m", "swarm_tui", *cmd], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False, env=ENV)
    base = median_ms([sys.executable, "-c", "pass"])
    print(f"python -c pass: {base:.0f} ms")
    for cmd in COMMANDS:
        ms = median_ms([sys.executable, "-m", "swarm_tui", *cmd])
        print(f"swarm-tui {' '.join(cmd):<14} {ms:6.0f} ms  {ms / base:5.1f}x  (target <= 5x)")
    # what bounds the commands that read the validated config (report's prices, keys,
    # canary): importing the config's libraries alone, before any of ours
    for code in ("from pydantic import BaseModel", "import pydantic_settings"):
        ms = median_ms([sys.executable, "-c", code])
        print(f"floor: {code:<32} {ms:6.0f} ms  {ms / base:5.1f}x")


if __name__ == "__main__":
    main()
