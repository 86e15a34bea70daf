"""Soak: a run split across workers on PostgreSQL while the server is restarted and a worker
is stopped past its lease — against the same run without faults, in the same invocation.

Each round: a throwaway PostgreSQL cluster (initdb/pg_ctl, durable commits), the simulator
in its own process counting what it is sent, `run --workers 3` of TASKS tasks. The fault
round restarts the server (`pg_ctl stop -m immediate`, then start) every --every seconds
and SIGSTOPs one worker for 2.5x its lease once. Printed per round: wall, wall over the
fault-free round's, requests the gateway answered, attempts stored, answers lost (tasks
without a result), tasks sent more than once, and what the store shows of them.

    python bench/soak.py [--tasks 20000] [--concurrency 300] [--profile fixed:300]
                         [--every 30] [--lease 6]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx2
import psycopg

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent))
from common import sim_process

from tests.pg_server import ThrowawayPostgres

KEY = "sk-soak-0123456789abcdefghijklmnop"


def q(url: str, sql: str, args: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True, connect_timeout=3) as c:
        return c.execute(sql, args).fetchall()


def faults(server: ThrowawayPostgres, url: str, every: float, lease: float,
           done: threading.Event, log: list[str]) -> None:
    """Restart the server every `every` s; once, SIGSTOP a worker for 2.5 leases."""
    t0 = time.monotonic()
    stopped = False
    next_restart = t0 + every
    while not done.wait(0.5):
        now = time.monotonic()
        if not stopped and now - t0 > every / 2:
            try:
                rows = q(url, "SELECT pid FROM workers WHERE ended_at IS NULL ORDER BY worker")
            except psycopg.Error:
                rows = []
            if rows:
                pid = rows[0][0]
                os.kill(pid, signal.SIGSTOP)
                log.append(f"{now - t0:5.1f} s  SIGSTOP worker pid {pid} for {2.5 * lease:.0f} s")
                done.wait(2.5 * lease)
                os.kill(pid, signal.SIGCONT)
                stopped = True
        if time.monotonic() >= next_restart and not done.is_set():
            server.crash()
            down = time.monotonic()
            server.start_again()
            log.append(f"{down - t0:5.1f} s  server restarted (down "
                       f"{time.monotonic() - down:.1f} s)")
            next_restart = time.monotonic() + every


def one(args: argparse.Namespace, base: str, with_faults: bool) -> dict:
    server = ThrowawayPostgres(durable=True)
    server.start()
    try:
        url = server.url()
        stats0 = httpx2.get(base.replace("/v1", "/sim/stats")).json()
        tmp = Path(tempfile.mkdtemp(prefix="soak-"))
        cfg = tmp / "c.toml"
        cfg.write_text(f'[gateways.gw]\nbase_url = "{base}"\nkey_env = ["SOAK_KEY"]\n'
                       "[store]\nunwritable_grace_s = 60\n")
        w = tmp / "w.jsonl"
        w.write_text("".join(json.dumps({"id": f"t{i:06d}", "prompt": f"task {i}",
                                         "max_tokens": 16}) + "\n" for i in range(args.tasks)))
        env = {**os.environ, "SOAK_KEY": KEY, "SWARM_TUI_DB": url,
               "SWARM_TUI_LEASE_S": str(args.lease), "XDG_STATE_HOME": str(tmp / "state")}
        log: list[str] = []
        done = threading.Event()
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "swarm_tui", "run", str(w), "--config", str(cfg),
             "--workers", "3", "--concurrency", str(args.concurrency), "--headless", "--json",
             "--quiet", "--no-preflight"], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        thread = None
        if with_faults:
            thread = threading.Thread(target=faults, args=(server, url, args.every, args.lease,
                                                           done, log), daemon=True)
            thread.start()
        out, err = proc.communicate(timeout=1800)
        wall = time.monotonic() - t0
        done.set()
        if thread is not None:
            thread.join(60)
        if proc.returncode not in (0, 3):
            print(f"run exited {proc.returncode}:", err[-1500:], file=sys.stderr)
        stats = httpx2.get(base.replace("/v1", "/sim/stats")).json()
        requests = stats.get("requests", 0) - stats0.get("requests", 0)
        (attempts,), = q(url, "SELECT COUNT(*) FROM attempts")
        (answered,), = q(url, "SELECT COUNT(*) FROM results WHERE state = 'succeeded'")
        (twice,), = q(url, "SELECT COUNT(*) FROM (SELECT seq FROM attempts GROUP BY seq HAVING "
                           "COUNT(*) > 1) x")
        (lost,), = q(url, "SELECT COUNT(*) FROM attempts WHERE outcome = 'lost'")
        summary = json.loads(out) if out.strip() else {}
        return {"faults": with_faults, "exit": proc.returncode, "wall_s": wall,
                "requests": requests, "attempts": attempts, "answered": answered,
                "unanswered": args.tasks - answered, "tasks_sent_twice": twice,
                "report_sent_twice": summary.get("sent_twice"), "sent_lost": lost,
                "log": log, "stderr": err.strip().splitlines()[-3:]}
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=300)
    ap.add_argument("--profile", default="fixed:300")
    ap.add_argument("--every", type=float, default=30.0)
    ap.add_argument("--lease", type=float, default=6.0)
    args = ap.parse_args()
    ideal = args.tasks / args.concurrency * int(args.profile.split(":")[1]) / 1000
    print(f"soak: {args.tasks} tasks, 3 workers, {args.concurrency} in flight on "
          f"{args.profile} (ideal {ideal:.0f} s); faults: a restart every {args.every:.0f} s, "
          f"one worker SIGSTOPped for {2.5 * args.lease:.0f} s (lease {args.lease:.0f} s)")
    with sim_process("--profile", args.profile) as base:
        rounds = [one(args, base, False), one(args, base, True)]
    baseline = rounds[0]["wall_s"]
    for r in rounds:
        print(f"\n{'with faults' if r['faults'] else 'no faults (baseline)'}: exit {r['exit']}, "
              f"wall {r['wall_s']:.1f} s = {r['wall_s'] / baseline:.2f}x the baseline")
        print(f"  gateway answered {r['requests']} requests; stored attempts {r['attempts']} "
              f"(of them sent, answer lost: {r['sent_lost']}); requests - stored = "
              f"{r['requests'] - r['attempts']}")
        print(f"  tasks answered {r['answered']}, unanswered {r['unanswered']}; tasks sent more "
              f"than once {r['tasks_sent_twice']}, report's SENT MORE THAN ONCE "
              f"{r['report_sent_twice']}")
        for line in r["log"]:
            print(f"  {line}")
        if r["exit"] not in (0, 3):
            print("  stderr:", *r["stderr"], sep="\n    ")


if __name__ == "__main__":
    main()
