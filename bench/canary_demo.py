"""The canary demo on a loaded machine: does it reach 100 % every time when the candidate is
fine, and abort every time when the candidate really is slow? (issue 16)

Each try is the real `swarm-tui run --demo N --canary-demo --headless` (its simulators in
their own processes) with a fresh database, stopped (SIGINT) once the canary is complete or
aborted. The hog — N busy processes, `stress`-style — runs for the loaded tries; one try of
each kind without it is the baseline, and the loaded tries' time to their verdict is printed
as a ratio of it.

    python bench/canary_demo.py [--tries 5] [--hog 2] [--tasks 60000] [--rate 250]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

SLOW = "fixed:600"  # the candidate's simulator: every call 600 ms (p95 limit 350)


def _spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def hog(n: int) -> Iterator[None]:
    procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
            p.join()


def canary_state(db: Path) -> tuple[str, int] | None:
    if not db.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=1)) as c:
            row = c.execute("SELECT status, pct FROM canary").fetchone()
    except sqlite3.Error:
        return None
    return (row[0], row[1]) if row else None


def history(db: Path) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(db)) as c:
        return c.execute("SELECT at, action, to_pct, to_status, reason FROM canary_actions "
                         "ORDER BY id").fetchall()


def one_try(tasks: int, rate: float, profile: str | None, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "runs.db"
        env = {**os.environ, "SWARM_TUI_DB": str(db), "XDG_CONFIG_HOME": str(Path(tmp) / "x")}
        cmd = [sys.executable, "-m", "swarm_tui", "run", "--demo", str(tasks), "--canary-demo",
               "--headless", "--quiet", "--json", "--rate", str(rate)]
        if profile:
            cmd += ["--sim-profile", profile]
        started = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        final = None
        while time.monotonic() - started < timeout_s and proc.poll() is None:
            state = canary_state(db)
            if state is not None and state[0] in ("complete", "aborted"):
                final = state
                break
            time.sleep(1.0)
        took = time.monotonic() - started
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # cancel cleanly: the verdict is in
        try:
            _out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, err = proc.communicate()
        final = final or canary_state(db)
        moves = [(round(at - history(db)[0][0]), a, pct, st, (reason or "")[:90])
                 for at, a, pct, st, reason in history(db)] if db.exists() else []
        return {"final": final, "s": took, "moves": moves, "stderr": err[-400:]}


def series(name: str, want: str, tries: int, n_hog: int, tasks: int, rate: float,
           profile: str | None, timeout_s: float) -> tuple[int, float]:
    print(f"\n{name}: baseline (no hog)", flush=True)
    base = one_try(tasks, rate, profile, timeout_s)
    print(f"  {base['final']} in {base['s']:.0f} s; moves {base['moves']}", flush=True)
    ok = 0
    times = []
    with hog(n_hog):
        for i in range(tries):
            r = one_try(tasks, rate, profile, timeout_s)
            good = r["final"] is not None and r["final"][0] == want
            ok += good
            times.append(r["s"])
            print(f"  try {i + 1} under a {n_hog}-process hog: {r['final']} in {r['s']:.0f} s "
                  f"({r['s'] / base['s']:.2f}× the baseline) {'OK' if good else 'MISSED'}",
                  flush=True)
            for m in r["moves"]:
                print(f"      +{m[0]:>4} s {m[1]:<8} → {m[2]:>3}% {m[3]:<11} {m[4]}")
            if not good:
                print("      stderr:", r["stderr"].replace("\n", " | "))
    mean = sum(times) / len(times)
    print(f"{name}: {ok}/{tries} {want} under the hog; mean time to verdict {mean:.0f} s = "
          f"{mean / base['s']:.2f}× the unloaded baseline ({base['s']:.0f} s)", flush=True)
    return ok, mean / base["s"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tries", type=int, default=5)
    ap.add_argument("--hog", type=int, default=2, help="busy processes (default: 2 = cores)")
    ap.add_argument("--tasks", type=int, default=60000)
    ap.add_argument("--rate", type=float, default=250.0)
    ap.add_argument("--timeout", type=float, default=420.0)
    a = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores; each try: run --demo {a.tasks} --canary-demo "
          f"--rate {a.rate:g}, stopped at the verdict")
    fine = series("fine candidate (gateway profile)", "complete", a.tries, a.hog, a.tasks,
                  a.rate, None, a.timeout)
    slow = series(f"slow candidate ({SLOW})", "aborted", a.tries, a.hog, a.tasks, a.rate, SLOW,
                  a.timeout)
    print(json.dumps({"promoted": fine[0], "aborted": slow[0], "tries": a.tries,
                      "promote_time_ratio": round(fine[1], 2),
                      "abort_time_ratio": round(slow[1], 2)}))


if __name__ == "__main__":
    main()
