"""Client overhead of our runner vs a bare AsyncOpenAI loop and a raw aiohttp loop,
measured in the same run (issue 34).

5,000 tasks at 140 in flight against the simulator (separate process) on `fixed:200`.
Variants, each in its own process:
- bare-httpx2 / bare-aiohttp: the team's loop done right on the openai SDK
- raw-aiohttp: one aiohttp session on uvloop reading SSE lines, json.loads per line — no
  SDK, no retries, no engine: the floor
- runner: swarm-tui's engine on its wire client (the default), uvloop
- runner-sdk: the same engine through the SDK (`--transport aiohttp`), uvloop
Prints wall/ideal (ideal = tasks x latency / in-flight), client CPU per call, and each
variant's CPU as a ratio of the bare SDK loop's and of the raw loop's.

With `--rounds N` every variant runs once per round, round after round, and each figure is
the median over the rounds; the ratio to the raw loop is taken within each round (a machine
that slows down part-way slows both sides of that round's ratio) and its per-round values
printed. `--only raw-aiohttp,runner` runs those variants alone.

    python bench/overhead.py [--tasks 5000] [--concurrency 140] [--profile fixed:200]
                             [--rounds 1] [--only VARIANT,...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import cpu_seconds, run_child, sim_process

KEY = "sk-bench-0123456789abcdefghijklmnop"
VARIANTS = ("bare-httpx2", "bare-aiohttp", "raw-aiohttp", "runner", "runner-sdk")


async def bare(url: str, n: int, conc: int, transport: str) -> dict:
    """The team's loop done right: one AsyncOpenAI, a semaphore, gather(return_exceptions)."""
    import httpx2
    import openai

    from swarm_tui.workload import demo_tasks

    limits = httpx2.Limits(max_connections=conc, max_keepalive_connections=conc)
    http = (openai.DefaultAioHttpClient(limits=limits) if transport == "aiohttp"
            else openai.DefaultAsyncHttpxClient(limits=limits))
    client = openai.AsyncOpenAI(api_key=KEY, base_url=url, max_retries=0, http_client=http)
    tasks = demo_tasks(n)
    sem = asyncio.Semaphore(conc)
    ok = 0

    async def one(t) -> None:
        nonlocal ok
        async with sem:
            stream = await client.chat.completions.create(
                model="deepseek-v3.2", max_tokens=t.max_tokens, stream=True,
                stream_options={"include_usage": True},
                messages=[{"role": "system", "content": t.system},
                          {"role": "user", "content": t.prompt}])
            async for _chunk in stream:
                pass
            ok += 1

    c0, t0 = cpu_seconds(), time.perf_counter()
    await asyncio.gather(*(one(t) for t in tasks), return_exceptions=True)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    await client.close()
    return {"ok": ok, "wall_s": wall, "cpu_s": cpu}


async def raw(url: str, n: int, conc: int) -> dict:
    """The floor: one aiohttp session, SSE lines, json.loads per line."""
    import aiohttp

    from swarm_tui.workload import demo_tasks

    tasks = demo_tasks(n)
    sem = asyncio.Semaphore(conc)
    ok = 0
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc)) as session:

        async def one(t) -> None:
            nonlocal ok
            body = json.dumps({"model": "deepseek-v3.2", "max_tokens": t.max_tokens,
                               "stream": True, "stream_options": {"include_usage": True},
                               "messages": [{"role": "system", "content": t.system},
                                            {"role": "user", "content": t.prompt}]})
            async with sem, session.post(url + "/chat/completions", data=body,
                                         headers=headers) as resp:
                async for line in resp.content:
                    if line.startswith(b"data: ") and line[6:11] != b"[DONE":
                        json.loads(line[6:])
                ok += resp.status == 200

        c0, t0 = cpu_seconds(), time.perf_counter()
        await asyncio.gather(*(one(t) for t in tasks), return_exceptions=True)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    return {"ok": ok, "wall_s": wall, "cpu_s": cpu}


async def runner(url: str, n: int, conc: int, transport: str = "wire") -> dict:
    from swarm_tui.engine.routing import SingleGateway
    from swarm_tui.engine.runner import RunPolicy, SwarmRunner
    from swarm_tui.gateway.client import GatewayClient
    from swarm_tui.prices import load_price_table
    from swarm_tui.settings.run_sections import RetryConfig
    from swarm_tui.settings.sections import RoutingConfig
    from swarm_tui.workload import demo_tasks

    gw = GatewayClient("sim", url, [(KEY, None)], pool=conc, timeout_s=30,
                       transport=transport)  # type: ignore[arg-type]
    policy = RunPolicy(conc, RetryConfig(), RoutingConfig(), "deepseek-v3.2")
    r = SwarmRunner(demo_tasks(n), {"sim": gw}, SingleGateway("sim"), policy,
                    load_price_table(None, {}, "bench"))
    events = 0

    def count(_e) -> None:
        nonlocal events
        events += 1

    r.consumers.append(count)
    c0, t0 = cpu_seconds(), time.perf_counter()
    await r.run()
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    await gw.aclose()
    lat = sorted(a.latency_ms for a in r.records if a.latency_ms is not None)
    return {"ok": r.counts["succeeded"], "wall_s": wall, "cpu_s": cpu, "events": events,
            "p50_ms": lat[len(lat) // 2], "p95_ms": lat[int(len(lat) * 0.95)]}


def child(variant: str, url: str, n: int, conc: int) -> None:
    import uvloop  # the CLI's loop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as loop:
        if variant == "runner":
            out = loop.run(runner(url, n, conc))
        elif variant == "runner-sdk":
            out = loop.run(runner(url, n, conc, "aiohttp"))
        elif variant == "raw-aiohttp":
            out = loop.run(raw(url, n, conc))
        else:
            out = loop.run(bare(url, n, conc, variant.split("-")[1]))
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=140)
    ap.add_argument("--profile", default="fixed:200")
    ap.add_argument("--child", choices=VARIANTS)
    ap.add_argument("--url")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", help="comma-separated variants (default: all)")
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.url, a.tasks, a.concurrency)
    if a.only and (unknown := set(a.only.split(",")) - set(VARIANTS)):
        ap.error(f"--only: no variant {', '.join(sorted(unknown))} (variants: "
                 f"{', '.join(VARIANTS)})")
    variants = tuple(v for v in VARIANTS if not a.only or v in a.only.split(","))
    latency_s = float(a.profile.split(":")[1]) / 1000 if a.profile.startswith("fixed:") else None
    rounds: list[dict[str, dict]] = []
    with sim_process("--profile", a.profile) as url:
        for _ in range(a.rounds):
            rounds.append({v: json.loads(run_child(
                __file__, "--child", v, "--url", url, "--tasks", str(a.tasks),
                "--concurrency", str(a.concurrency))) for v in variants})

    def med(v: str, key: str) -> float:
        return statistics.median(r[v][key] for r in rounds)

    def cpu_ratio(v: str, base: str) -> tuple[float, list[float]]:
        per_round = [r[v]["cpu_s"] / r[base]["cpu_s"] for r in rounds]
        return statistics.median(per_round), per_round

    ideal = a.tasks * latency_s / a.concurrency if latency_s else None
    print(f"{a.tasks} tasks, {a.concurrency} in flight, profile {a.profile}, simulator in its "
          f"own process; ideal wall {ideal:.2f} s" if ideal else "")
    print(f"median of {a.rounds} round(s), variants in turn within each round")
    print(f"{'variant':<16}{'ok':>6}{'wall s':>9}{'wall/ideal':>12}{'CPU ms/call':>13}"
          f"{'vs bare SDK':>13}{'vs raw':>9}")
    for v in variants:
        wall, per_call = med(v, "wall_s"), med(v, "cpu_s") / a.tasks
        ratio = f"{wall / ideal:.2f}" if ideal else "-"
        vs_sdk = (f"{cpu_ratio(v, 'bare-httpx2')[0]:>12.2f}x" if "bare-httpx2" in variants
                  else f"{'-':>13}")
        vs_raw = (f"{cpu_ratio(v, 'raw-aiohttp')[0]:>8.2f}x" if "raw-aiohttp" in variants
                  else f"{'-':>9}")
        print(f"{v:<16}{int(med(v, 'ok')):>6}{wall:>9.2f}{ratio:>12}{per_call * 1000:>13.2f}"
              f"{vs_sdk}{vs_raw}")
    if "runner" in variants and "raw-aiohttp" in variants and a.rounds > 1:
        _, per_round = cpu_ratio("runner", "raw-aiohttp")
        print("runner vs raw, each round: " + ", ".join(f"{x:.2f}x" for x in per_round))
    if "runner" not in variants:
        return
    print(f"runner latency p50 {med('runner', 'p50_ms'):.0f} ms / p95 "
          f"{med('runner', 'p95_ms'):.0f} ms (server answers in {a.profile}); "
          f"{med('runner', 'events') / a.tasks:.1f} events per task")


if __name__ == "__main__":
    main()
