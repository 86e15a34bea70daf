"""A finished run's console: how much CPU `watch` of it uses while nobody types, and how
long `q` takes to exit (issues 34 and 36). The real binary on a pty (80x24).

Makes a 300-task run (headless), then: `watch last` for 15 s of idle CPU (from /proc),
and `run --demo 2000 --rate 0` four times: FINISHED on screen, then `q`, timed to exit.

    python bench/console_idle.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.pty_harness import PtyApp


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rsplit(") ", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {"SWARM_TUI_DB": f"{tmp}/runs.db", "XDG_CONFIG_HOME": f"{tmp}/x",
               "XDG_DATA_HOME": f"{tmp}/d"}
        subprocess.run([sys.executable, "-m", "swarm_tui", "run", "--demo", "300",
                        "--headless", "--quiet"], env={**os.environ, **env}, check=False,
                       capture_output=True)
        app = PtyApp("watch", "last", env=env)
        try:
            app.wait_for("FINISHED", timeout=60)
            time.sleep(3)
            c0, t0 = cpu_s(app.pid), time.monotonic()
            while time.monotonic() < t0 + 15:
                app.pump(0.2)
            share = (cpu_s(app.pid) - c0) / (time.monotonic() - t0)
            app.send("q")
            app.wait(30)
        finally:
            app.kill()
        print(f"watch of a finished run, idle: {share * 100:.1f}% of a core over 15 s")
        exits = []
        for _ in range(4):
            app = PtyApp("run", "--demo", "2000", "--rate", "0", env=env)
            try:
                app.wait_for("FINISHED", timeout=120)
                time.sleep(1)
                t = time.monotonic()
                app.send("q")
                app.wait(60)
                exits.append(time.monotonic() - t)
            finally:
                app.kill()
        print("q on a finished run, to exit: " + ", ".join(f"{x:.2f}" for x in exits) + " s")


if __name__ == "__main__":
    main()
