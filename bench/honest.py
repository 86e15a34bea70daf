"""Honest numbers (issue 16): per-call success against the team's published figures, and
what client load does to measured latency — with the engine's own loop lag beside it.

Every swarm is the real `swarm-tui run … --json`, its simulator in a separate process.
Prints rates against the team's figures and p95 ratios against the low-load run of the
same session (the machine is shared and noisy: ratios, not absolute times).

    python bench/honest.py            # 20,000 calls per profile, then the load ladder
    python bench/honest.py --quick    # 4,000
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

TEAM = {"direct": 0.968, "gateway": 0.994}  # per call, MISSION.md


def run(db: str, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "swarm_tui", "run", "--headless", "--json",
                        "--quiet", *args], capture_output=True, text=True, timeout=900,
                       env={**os.environ, "SWARM_TUI_DB": db}, stdin=subprocess.DEVNULL)
    if r.returncode not in (0, 3):
        raise SystemExit(f"run failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def main() -> None:
    n = 4000 if "--quick" in sys.argv else 20000
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "runs.db")
        print(f"per-call success over ≥{n:,} calls (team's figures are per call):")
        print(f"{'profile':<9} {'calls':>7} {'call ok':>8} {'team':>6} {'diff pts':>9} "
              f"{'task ok':>8}")
        for profile, team in TEAM.items():
            s = run(db, "--demo", str(n), "--sim-profile", profile, "--concurrency", "100",
                    "--sim-seed", "11")
            diff = (s["call_success_rate"] - team) * 100
            print(f"{profile:<9} {s['calls']:>7,} {s['call_success_rate']:>8.2%} {team:>6.1%} "
                  f"{diff:>+9.2f} {s['success_rate']:>8.2%}")
        print("\nclient load on the gateway profile (published p95 278 ms), 3,000 tasks:")
        print(f"{'in flight':>9} {'p50':>5} {'p95':>5} {'p95/base':>9} {'loop lag p95':>13} "
              f"{'client-bound':>13} {'SLA':>14}")
        base = None
        for c in (20, 100, 300):
            s = run(db, "--demo", "3000", "--concurrency", str(c), "--sim-rate-429", "0",
                    "--sim-rate-503", "0", "--sim-seed", "5")
            p95 = s["latency_ms"]["p95"]
            base = base or p95
            sla = "met" if s["sla"]["met"] else (
                "inconclusive" if s["sla"].get("inconclusive") else "breached")
            lag = s.get("client_lag_p95_ms")
            print(f"{c:>9} {s['latency_ms']['p50']:>5.0f} {p95:>5.0f} {p95 / base:>9.2f} "
                  f"{lag if lag is None else round(lag, 1):>13} {s['client_bound']!s:>13} "
                  f"{sla:>14}")


if __name__ == "__main__":
    main()
