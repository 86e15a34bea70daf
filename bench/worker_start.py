"""What one more worker process costs (issue 34: "a worker starts in ≤ 0.5 s of CPU").

The same 2-task run started as `run --workers 1` and as `run --workers 3` (the simulator in
its own process, a fresh SQLite file each), alternated over rounds: the difference in CPU
of every swarm-tui process of the run (getrusage of the waited-for children), halved, is
what one worker costs from its exec to its exit — its imports, config, store, preflight,
leases and teardown, with at most one call. That bounds its start from above. The
baseline, measured in the same run: `python -c pass`.

    python bench/worker_start.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import sim_process

KEY = "sk-bench-0123456789abcdefghijklmnop"


def children_cpu(argv: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode not in (0, 3):
        raise RuntimeError(r.stderr[-2000:])
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    with sim_process("--profile", "fixed:50") as url, tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "c.toml"
        cfg.write_text(f'[gateways.local]\nbase_url = "{url}"\nkey_env = ["BENCH_KEY"]\n')
        env = {**os.environ, "BENCH_KEY": KEY, "XDG_CONFIG_HOME": tmp}
        pass_cpu, one, three = [], [], []
        for i in range(a.rounds):
            pass_cpu.append(children_cpu([sys.executable, "-c", "pass"], env))
            for workers, into in ((1, one), (3, three)):
                env["SWARM_TUI_DB"] = str(Path(tmp) / f"runs-{i}-{workers}.db")
                into.append(children_cpu(
                    [sys.executable, "-m", "swarm_tui", "--config", str(cfg), "run", "--demo",
                     "2", "--headless", "--quiet", "--workers", str(workers)], env))
    base = statistics.median(pass_cpu)
    per_worker = [(t - o) / 2 for o, t in zip(one, three, strict=True)]
    w = statistics.median(per_worker)
    print(f"python -c pass: {base * 1000:.0f} ms of CPU (median of {a.rounds})")
    print(f"run --workers 1: {statistics.median(one) * 1000:.0f} ms, --workers 3: "
          f"{statistics.median(three) * 1000:.0f} ms (every process of the run)")
    print(f"one more worker, exec to exit: median {w * 1000:.0f} ms of CPU "
          f"(rounds: {', '.join(f'{x * 1000:.0f}' for x in per_worker)}) = "
          f"{w / base:.1f}x python -c pass; target ≤ 500 ms: "
          f"{'met' if w <= 0.5 else 'missed'}")


if __name__ == "__main__":
    main()
