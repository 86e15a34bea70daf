"""Rate limits and gateway quirks the way real gateways send them.

Against our simulator (which now speaks per-key quotas with real headers, per-model
429s, in-stream error events, malformed chunks, ignored `stream`) and against a server
we did not write: llmock's per-key continuously refilling quotas.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from statistics import quantiles

import httpx2
import pytest

from swarm_tui.core import events as ev
from swarm_tui.engine.runner import SwarmRunner
from swarm_tui.gateway.client import GatewayClient
from swarm_tui.gateway.errors import CONNECTION, PROTOCOL, RATE_LIMITED, SERVER
from swarm_tui.settings.run_sections import RetryConfig
from swarm_tui.settings.sections import RoutingConfig
from swarm_tui.workload import Task
from tests.conftest import Recorder, client_for, free_port, make_runner, tasks

KEYS = [f"sk-quota-{c * 24}" for c in "abc"]
pytestmark = pytest.mark.timeout(120)


def _p95(values: list[float]) -> float:
    return quantiles(values, n=20)[-1] if len(values) > 1 else (values[0] if values else 0.0)


# -- quotas --------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["least-in-flight", "round-robin", "proactive"])
@pytest.mark.slow
async def test_per_key_quotas_fail_nothing_and_pace_near_the_quota(sim_factory, strategy):
    # 3 keys x (5-call bucket, 600/min = 10/s refill): 30 calls/s in all, after a burst of 15
    rpm, burst, n = 600, 5, 135
    sim = sim_factory(profile="fixed:20", rpm_per_key=rpm, quota_burst=burst)
    async with client_for(sim, keys=KEYS) as gw:
        gw.pool.strategy = strategy
        runner = make_runner(gw, tasks(n), concurrency=50)
        t0 = time.monotonic()
        await asyncio.wait_for(runner.run(), 90)
        wall = time.monotonic() - t0
    calls = sim.app.stats["requests"]
    assert runner.counts == {"succeeded": n, "failed": 0, "cancelled": 0}
    # paced from the gateway's x-ratelimit-* headers: the first wave of 50 on a 15-call
    # burst alone would draw 35 429s (26 %) and every later wave more. The ≤ 5 % target is
    # bench/ratelimits.py's on an idle machine; here the server shares this process, and a
    # slow or loaded machine delivers paced sends in clumps (9 of 144 seen on one core)
    assert sim.app.stats["429"] <= 0.20 * calls, (sim.app.stats, strategy)
    # paced to the next free slot, not to a full refill: the quota-bound ideal is
    # (tasks - burst) / (keys x refill rate); the ≤ 1.15x figure is bench/ratelimits.py's
    # (wall time is not asserted tightly here: a loaded machine stretches it)
    ideal = (n - 3 * burst) / (3 * rpm / 60) + 0.02
    assert wall <= 3 * ideal, (wall, ideal)


def _llmock(port: int, *args: str) -> subprocess.Popen:
    bin_dir = os.path.dirname(sys.executable)
    proc = subprocess.Popen([os.path.join(bin_dir, "llmock"), "serve", "--port", str(port),
                             "--host", "127.0.0.1", "--log-level", "warning", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx2.get(f"http://127.0.0.1:{port}/v1/models", timeout=1,
                       headers={"authorization": "Bearer sk-probe"})
            return proc
        except httpx2.TransportError:
            time.sleep(0.1)
    proc.kill()
    pytest.fail("llmock did not start")


async def _run_on_llmock(quota: tuple[str, ...], work: list[Task], timeout_s: float,
                         consumers: list | None = None) -> SwarmRunner:
    """`work` on 3 keys against llmock with that quota, 40 in flight; the finished runner."""
    port = free_port()
    proc = _llmock(port, *quota, "--latency-ms", "20", "--tool-mode", "off")
    try:
        gw = GatewayClient("llmock", f"http://127.0.0.1:{port}/v1",
                           [(k, None) for k in KEYS], pool=60, timeout_s=20)
        try:
            runner = make_runner(gw, work, concurrency=40, consumers=consumers or [])
            await asyncio.wait_for(runner.run(), timeout_s)
        finally:
            await gw.aclose()
    finally:
        proc.terminate()
        proc.wait(10)
    return runner


def _429s(runner: SwarmRunner) -> tuple[int, int]:
    """(429s, calls) over every attempt of the run."""
    attempts = [x for a in runner.records for x in a.attempts]
    return sum(1 for x in attempts if x.status_code == 429), len(attempts)


@pytest.mark.slow
async def test_a_third_party_quota_server_llmock_fails_no_task():
    """llmock: per-key buckets of 60/min (burst 60), Retry-After = the real wait,
    x-ratelimit-* on every answer. 3 keys, 195 tasks: 180 fit the bursts, 15 wait for
    the refill (3 calls/s)."""
    runner = await _run_on_llmock(("--rpm", "60"), tasks(195, max_tokens=8), 90,
                                  consumers=[Recorder()])
    assert runner.counts == {"succeeded": 195, "failed": 0, "cancelled": 0}
    r429, calls = _429s(runner)
    # ≤ 5 % on an idle machine (bench/ratelimits.py: 0.2–2.2 %); a loaded one delays our
    # sends unevenly, so the bound here is looser — no task fails either way
    assert r429 <= 0.10 * calls, (r429, calls)
    # the 15 beyond the bursts wait for the next free slot (a second at 60/min), not for
    # the bucket's full refill: every task's queue time, retries included, stays far
    # below the quota's own 60 s (a bound set by the quota, not by the machine's speed)
    queued = [x.queue_ms for a in runner.records for x in a.attempts]
    assert max(queued) < 60_000 / 2, max(queued)


PROSE = ("The on-call engineer reads the swarm's latency, its errors and what it cost, "
         "then decides whether the canary moves on. ") * 14  # ~1,600 characters


@pytest.mark.slow
async def test_a_tokens_per_minute_quota_is_paced_not_hammered():
    """llmock's tokens-per-minute quota alone (no request quota): its answers carry
    x-ratelimit-*-tokens and its 429s say nothing of requests. It charges a call its body's
    bytes / 4 plus its max_tokens (~650 here, ~20 % over our prompt estimate: the pool
    learns the difference). 3 keys x 30,000 tokens/min: ~137 calls fit the buckets, the
    rest wait for the refill (~2.3 calls/s). Read as an open key, every other call of those
    was a 429 (bench/ratelimits.py: 57 % of all calls at 100 in flight)."""
    work = [Task(id=f"t{i}", prompt=f"{i}: {PROSE}", max_tokens=200) for i in range(165)]
    runner = await _run_on_llmock(("--tpm", "30000"), work, 120)
    assert runner.counts == {"succeeded": 165, "failed": 0, "cancelled": 0}
    r429, calls = _429s(runner)
    assert r429 <= 0.10 * calls, (r429, calls)


@pytest.mark.slow
async def test_two_models_spending_one_key_wide_quota_are_paced_together():
    """The team's routing over llmock's per-key tokens quota (a LiteLLM virtual key's
    tpm_limit is the same): long prompts go to kimi-k2.5, short ones to deepseek-v3.2, on
    the same keys. Each model's bucket heard the gateway's count fall by what the other
    sent; a key whose answers said so twice is paced as one quota from then on (with a
    bucket per model each spent the key's whole quota: bench/ratelimits.py --only
    two-models)."""
    work = [Task(id=f"t{i}", prompt=f"{i}: " + PROSE * (8 if i % 4 == 0 else 1),
                 max_tokens=200) for i in range(120)]
    notes: list[str] = []
    runner = await _run_on_llmock(("--tpm", "60000"), work, 120, consumers=[
        lambda e: notes.append(e.detail or "") if e.kind == ev.CONTROL else None])
    assert runner.counts == {"succeeded": 120, "failed": 0, "cancelled": 0}
    models = {a.model for a in runner.records}
    assert models == {"kimi-k2.5", "deepseek-v3.2"}  # routed by length, as configured
    slots = runner.gateways["llmock"].pool.slots
    joined = [s for s in slots if s.one_quota]
    assert joined, [(s.fingerprint, s.shared_signs) for s in slots]
    assert all(s.rate("kimi-k2.5") is s.rate("deepseek-v3.2") for s in joined)
    # each join is in the run's log, whether an answer or a refusal showed it
    told = {s.fingerprint for s in joined
            if any(s.fingerprint in n and "one quota for the key's models" in n for n in notes)}
    assert told == {s.fingerprint for s in joined}, notes


@pytest.mark.slow
async def test_one_models_429s_do_not_hold_another_model(sim_factory):
    """One key; kimi answers 429 (no Retry-After) to everything, deepseek is healthy."""
    sim = sim_factory(profile="fixed:30", model_429={"kimi-k2.5": 1.0})
    work = ([Task(id=f"k{i}", prompt="x", model="kimi-k2.5", max_tokens=8) for i in range(30)]
            + [Task(id=f"d{i}", prompt="x", model="deepseek-v3.2", max_tokens=8)
               for i in range(50)])
    async with client_for(sim) as gw:
        runner = make_runner(gw, work, concurrency=20,
                             retry=RetryConfig(base_backoff_s=0.05, rate_limit_max_wait_s=5.0),
                             routing=RoutingConfig(fallback={}))
        await asyncio.wait_for(runner.run(), 60)
    healthy = [a for a in runner.records if a.task.model == "deepseek-v3.2"]
    assert all(a.state == "succeeded" for a in healthy)
    starved = [a for a in runner.records if a.task.model == "kimi-k2.5"]
    # deepseek's tasks were all done before kimi's gave up waiting (5 s, the engine's
    # bound, whatever the machine); with the key cooling key-wide they waited ~62 s
    assert max(a.finished_ms or 0 for a in healthy) < min(a.finished_ms or 0 for a in starved)
    # they waited out rate_limit_max_wait_s, never spending an attempt on a 429
    assert all(a.state == "failed" and a.error_class == RATE_LIMITED for a in starved)
    key = gw.keys[0]
    assert key.rate("deepseek-v3.2").cooling_until == 0.0
    assert key.rate("kimi-k2.5").steps >= 1


@pytest.mark.slow
async def test_a_huge_retry_after_waits_no_longer_than_the_cap(sim_factory):
    sim = sim_factory(profile="fixed:20", rate_429=1.0, retry_after_s=3600)
    base = sim.base_url.replace("/v1", "")
    retry = RetryConfig(retry_after_cap_s=0.3, base_backoff_s=0.01)
    async with client_for(sim) as gw:
        gw.pool.retry_after_cap_s = retry.retry_after_cap_s
        runner = make_runner(gw, tasks(40), concurrency=10, retry=retry)
        run = asyncio.create_task(runner.run())
        while sim.app.stats["429"] < 15:
            await asyncio.sleep(0.01)
        longest = max(k.cooling_until for k in gw.keys) - time.monotonic()
        httpx2.post(f"{base}/sim/settings", json={"rate_429": 0.0})
        await asyncio.wait_for(run, 30)
    assert longest <= retry.retry_after_cap_s
    assert runner.counts["succeeded"] == 40
    waits = [x.retry_wait_s for a in runner.records for x in a.attempts if x.status_code == 429]
    assert waits and max(waits) <= retry.retry_after_cap_s


# -- what gateways actually send ----------------------------------------------------------------
async def test_an_error_event_inside_the_stream_is_retried_then_falls_back(sim_factory):
    sim = sim_factory(profile="fixed:20", rate_stream_error=1.0, stream_error_code=503,
                      fault_models=["deepseek-v3.2"])
    rec = Recorder()
    async with client_for(sim) as gw:
        runner = make_runner(gw, tasks(10), consumers=[rec],
                             retry=RetryConfig(max_attempts=2, base_backoff_s=0.01))
        await asyncio.wait_for(runner.run(), 30)
    assert runner.counts["succeeded"] == 10
    for a in runner.records:
        first = a.attempts[0]
        assert first.error_class == SERVER and first.status_code == 503
        assert "in-stream error" in (first.error_message or "")
        assert a.model == "kimi-k2.5" and a.attempts[-1].outcome == "ok"
    assert len(rec.kinds(ev.FALLBACK)) == 10


@pytest.mark.slow
async def test_malformed_chunks_are_a_retryable_protocol_error(sim_factory):
    sim = sim_factory(profile="fixed:10", rate_malformed=0.3, seed=5)
    async with client_for(sim) as gw:
        runner = make_runner(gw, tasks(300), retry=RetryConfig(base_backoff_s=0.01))
        await asyncio.wait_for(runner.run(), 60)
    assert runner.counts["succeeded"] >= 297  # ≥ 99 %
    classes = {x.error_class for a in runner.records for x in a.attempts if x.error_class}
    assert classes == {PROTOCOL}
    assert sim.app.stats["malformed"] > 50


async def test_a_truncated_json_body_is_retried_too(sim_factory):
    sim = sim_factory(profile="fixed:10", rate_malformed=0.3, seed=6)
    async with client_for(sim, stream=False) as gw:
        runner = make_runner(gw, tasks(100), retry=RetryConfig(base_backoff_s=0.01))
        await asyncio.wait_for(runner.run(), 60)
    assert runner.counts["succeeded"] >= 99
    assert any(x.error_class == PROTOCOL for a in runner.records for x in a.attempts)


async def test_a_gateway_that_ignores_stream_true_answers_in_one_call(sim_factory):
    sim = sim_factory(profile="fixed:10", ignore_stream=True)
    async with client_for(sim, stream=True) as gw:
        runner = make_runner(gw, tasks(50))
        await asyncio.wait_for(runner.run(), 30)
    assert runner.counts["succeeded"] == 50
    assert sim.app.stats["requests"] == 50  # one call each
    assert all(a.tokens_out > 0 and not a.usage_estimated and a.response_text
               for a in runner.records)


@pytest.mark.parametrize("transport", ["aiohttp", "httpx2"])
async def test_a_refused_connection_is_connection_not_timeout(transport):
    gw = GatewayClient("dead", f"http://127.0.0.1:{free_port()}/v1", [("sk-x-0123456789", None)],
                       pool=2, timeout_s=5, transport=transport)
    try:
        runner = make_runner(gw, tasks(1), retry=RetryConfig(max_attempts=1),
                             routing=RoutingConfig(fallback={}))
        await asyncio.wait_for(runner.run(), 30)
    finally:
        await gw.aclose()
    assert runner.records[0].error_class == CONNECTION


# -- keys in trouble ----------------------------------------------------------------------------
@pytest.mark.slow
async def test_preflight_disables_a_rejected_key_and_goes_on(sim_factory):
    sim = sim_factory(profile="fixed:10", keys=KEYS[:2], models_fail=2)
    async with client_for(sim, keys=KEYS) as gw:
        warnings = await gw.preflight()
        assert [k.state for k in gw.keys] == ["active", "active", "disabled"]
        assert any("rejected (401" in w and gw.keys[2].fingerprint in w for w in warnings)
        assert sim.app.stats["models"] == 4  # two 503s retried, then each good key once
        runner = make_runner(gw, tasks(30))
        await asyncio.wait_for(runner.run(), 30)
    assert runner.counts["succeeded"] == 30


async def test_preflight_fails_only_when_no_key_works(sim_factory):
    from swarm_tui.errors import UserError

    sim = sim_factory(profile="fixed:10", keys=["sk-only-this-one-works-000"])
    async with client_for(sim, keys=KEYS) as gw:
        with pytest.raises(UserError, match="no key works"):
            await gw.preflight()


@pytest.mark.slow
async def test_retiring_the_last_usable_key_makes_dispatch_wait_not_fail(sim_factory):
    from swarm_tui.gateway import keyops

    sim = sim_factory(profile="fixed:30")
    async with client_for(sim, keys=KEYS[:1]) as gw:
        runner = make_runner(gw, tasks(200), concurrency=10)
        run = asyncio.create_task(runner.run())
        while runner.done < 20:
            await asyncio.sleep(0.01)
        keyops.retire({gw.name: gw}, gw.keys[0].fingerprint)
        while runner.in_flight or runner.waiting_for_keys is None:  # drained, then parked
            await asyncio.sleep(0.01)  # (dispatch parks on its next pass: wait for it)
        waiting = runner.waiting_for_keys
        parked_done = runner.done
        assert runner.counts["failed"] == 0 and parked_done < 200
        keyops.enable({gw.name: gw}, gw.keys[0].fingerprint)
        runner.wake()
        await asyncio.wait_for(run, 30)
    assert waiting is not None and waiting.startswith("no usable key on sim")
    assert runner.counts == {"succeeded": 200, "failed": 0, "cancelled": 0}


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_key_state_travels_with_the_heartbeat_of_a_busy_run(tmp_path, sim_proc):
    """Results flow every 250 ms; the keys' live state must still be written every second
    (it used to be written once), so `keys list|retire` find the run."""
    import json
    import sqlite3

    from tests.conftest import TEST_KEY, swarm

    _port, cfg = sim_proc
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"id": f"t{i}", "prompt": "x", "max_tokens": 8}) + "\n"
                         for i in range(4000)))
    db = os.environ["SWARM_TUI_DB"]
    env = {**os.environ, "GW_KEY": TEST_KEY}
    run = subprocess.Popen([sys.executable, "-m", "swarm_tui", "run", str(w), "--config",
                            str(cfg), "--concurrency", "20", "--headless", "--quiet"],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL)
    seen: set[float] = set()
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 4 and time.monotonic() < deadline and run.poll() is None:
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as raw:
                    seen |= {r[0] for r in raw.execute("SELECT updated_at FROM key_state")}
            except sqlite3.OperationalError:
                pass
            time.sleep(0.2)
        assert len(seen) >= 4, seen  # refreshed again and again while results flowed
        listed = swarm("keys", "list", "--json", "--config", str(cfg), env={"GW_KEY": TEST_KEY})
        assert listed.returncode == 0 and '"calls"' in listed.stdout
        fp = json.loads(listed.stdout)[0]["fingerprint"]
        retired = swarm("keys", "retire", fp, "--config", str(cfg), env={"GW_KEY": TEST_KEY})
        assert retired.returncode == 0 and "retire sent to 1 running swarm" in retired.stdout
        enabled = swarm("keys", "enable", fp, "--config", str(cfg), env={"GW_KEY": TEST_KEY})
        assert enabled.returncode == 0
    finally:
        run.terminate()
        run.wait(30)
