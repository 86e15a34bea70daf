"""What importing aiohttp costs a process, its way and ours (issue 34; gateway/tls.py).

aiohttp builds two client TLS contexts at import, each loading the CA bundle; imported
through `swarm_tui.gateway.tls` the loads wait for an https address. Each round starts one
fresh interpreter per way, alternating (a machine that slows down part-way slows both),
and reads its CPU for the import alone (getrusage). Baseline in the same run: `import
aiohttp` as anyone imports it.

    python bench/aiohttp_import.py [ROUNDS]     (default 15)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

MEASURE = """
import resource
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
before = cpu()
{stmt}
print((cpu() - before) * 1000)
"""

WAYS = {"import aiohttp (its own way)": "import aiohttp",
        "through swarm_tui.gateway.tls": "import swarm_tui.gateway.tls",
        "and then an https client built (load_deferred)":
            "import swarm_tui.gateway.tls as t; t.load_deferred()"}


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    # as installed: compiled modules cached (see bench/startup.py)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for stmt in WAYS.values():  # once each first: the .pyc written
        subprocess.run([sys.executable, "-c", stmt], env=env, check=True)
    ms: dict[str, list[float]] = {name: [] for name in WAYS}
    for _ in range(rounds):
        for name, stmt in WAYS.items():
            out = subprocess.run([sys.executable, "-c", MEASURE.format(stmt=stmt)], env=env,
                                 capture_output=True, text=True, check=True).stdout
            ms[name].append(float(out))
    base = statistics.median(ms["import aiohttp (its own way)"])
    print(f"median of {rounds}, alternating; CPU of the import alone")
    for name, xs in ms.items():
        m = statistics.median(xs)
        print(f"{name:50s} {m:6.0f} ms  {m / base:4.2f}x  (min {min(xs):.0f}, "
              f"max {max(xs):.0f})")


if __name__ == "__main__":
    main()
