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

    python bench/overhead.py [--tasks 5000] [--concurrency 140] [--profile fixed:200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.url, a.tasks, a.concurrency)
    latency_s = float(a.profile.split(":")[1]) / 1000 if a.profile.startswith("fixed:") else None
    results = {}
    with sim_process("--profile", a.profile) as url:
        for v in VARIANTS:
            line = run_child(__file__, "--child", v, "--url", url, "--tasks", str(a.tasks),
                             "--concurrency", str(a.concurrency))
            results[v] = json.loads(line)
    base_cpu = results["bare-httpx2"]["cpu_s"] / a.tasks
    raw_cpu = results["raw-aiohttp"]["cpu_s"] / a.tasks
    ideal = a.tasks * latency_s / a.concurrency if latency_s else None
    print(f"{a.tasks} tasks, {a.concurrency} in flight, profile {a.profile}, simulator in its "
          f"own process; ideal wall {ideal:.2f} s" if ideal else "")
    print(f"{'variant':<16}{'ok':>6}{'wall s':>9}{'wall/ideal':>12}{'CPU ms/call':>13}"
          f"{'vs bare SDK':>13}{'vs raw':>9}")
    for v, r in results.items():
        per_call = r["cpu_s"] / a.tasks
        ratio = f"{r['wall_s'] / ideal:.2f}" if ideal else "-"
        print(f"{v:<16}{r['ok']:>6}{r['wall_s']:>9.2f}{ratio:>12}{per_call * 1000:>13.2f}"
              f"{per_call / base_cpu:>12.2f}x{per_call / raw_cpu:>8.2f}x")
    rr = results["runner"]
    print(f"runner latency p50 {rr['p50_ms']:.0f} ms / p95 {rr['p95_ms']:.0f} ms "
          f"(server answers in {a.profile}); {rr['events'] / a.tasks:.1f} events per task")


if __name__ == "__main__":
    main()
