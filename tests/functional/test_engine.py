"""The engine through the real openai SDK against the simulator over loopback."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from swarm_tui.core import events as ev
from swarm_tui.core.states import FINAL_STATES
from swarm_tui.settings.run_sections import RetryConfig
from swarm_tui.settings.sections import RoutingConfig
from swarm_tui.token_count import estimate_tokens
from swarm_tui.workload import Task, demo_tasks
from tests.conftest import Recorder, client_for, make_runner, tasks, until


async def test_hundred_agents_on_gateway_profile_all_succeed(sim_factory):
    server = sim_factory(profile="gateway", rate_429=None, rate_503=None)  # profile's own faults
    rec = Recorder()
    async with client_for(server) as gw:
        runner = make_runner(gw, demo_tasks(100), consumers=[rec])
        await runner.run()
    assert runner.counts == {"succeeded": 100, "failed": 0, "cancelled": 0}
    for a in runner.records:
        assert a.state == "succeeded"
        assert a.tokens_in > 0 and a.tokens_out > 0 and not a.usage_estimated
        assert a.ttft_ms is not None and 0 < a.ttft_ms <= a.latency_ms
        assert a.cost_usd is not None and a.cost_usd > 0
        assert a.response_text
    # dual-model routing: long prompts went to the long-context model
    models = Counter(a.model for a in runner.records)
    assert set(models) == {"kimi-k2.5", "deepseek-v3.2"}
    assert len(rec.kinds(ev.SUCCEEDED)) == 100


@pytest.mark.slow
async def test_injected_429s_retry_after_honoured_and_nothing_counted_twice(sim_factory):
    server = sim_factory(profile="fixed:30", rate_429=0.05, retry_after_s=0.3)
    rec = Recorder()
    async with client_for(server) as gw:
        runner = make_runner(gw, tasks(300), consumers=[rec],
                             retry=RetryConfig(max_attempts=4, retry_after_cap_s=5))
        await runner.run()
    finals = Counter(e[1] for e in rec.events if e[0] in ev.FINAL_KINDS)
    assert len(finals) == 300 and set(finals.values()) == {1}  # one final event per task
    for a in runner.records:
        assert a.state in ("succeeded", "failed")
        if a.state == "failed":
            assert a.error_class == "rate_limited"
    # no call counted twice (the server counts a stream as served after its last byte,
    # which the client may have read a moment before: wait on that, not on time)
    for _ in range(300):
        if server.app.stats["served"] >= runner.counts["succeeded"]:
            break
        await asyncio.sleep(0.01)
    assert runner.counts["succeeded"] == server.app.stats["served"]
    waited = []
    for a in runner.records:
        for prev, nxt in zip(a.attempts, a.attempts[1:], strict=False):
            assert prev.error_class == "rate_limited" and prev.status_code == 429
            assert prev.retry_wait_s == 0.3  # from retry-after-ms, not our backoff
            gap = nxt.started_ms - (prev.started_ms + prev.latency_ms)
            waited.append(gap)
            assert gap >= 300 - 2  # timer granularity
            assert nxt.queue_ms >= 300 - 2  # the wait is queue time, never latency
    assert len(waited) >= 5, "the injection should have produced some retries"
    assert len(rec.kinds(ev.RETRY_SCHEDULED)) == len(waited)


@pytest.mark.slow
async def test_queueing_is_never_reported_as_latency(sim_factory):
    server = sim_factory(profile="fixed:100")
    async with client_for(server) as gw:
        runner = make_runner(gw, tasks(100), concurrency=10)
        await runner.run()
    agents = sorted(runner.records, key=lambda a: a.attempts[0].started_ms)
    lat = sorted(a.latency_ms for a in agents)
    assert lat[len(lat) // 2] >= 95, lat  # the server's 100 ms, never less
    first, last = agents[:10], agents[-10:]
    last_queue = min(a.queue_ms for a in last)
    assert last_queue > 700  # ten waves of ≥ 100 ms: the queue grows (a lower bound)
    # relations, not absolute times (a loaded machine slows everything alike): the first
    # wave waits for nothing but its own connection setup, the last waited nine waves —
    # and none of that waiting is in the last wave's latency
    assert max(a.queue_ms for a in first) < last_queue / 3
    assert max(a.latency_ms for a in last) < last_queue / 2


async def test_cancelled_run_leaves_nothing_running(sim_factory):
    server = sim_factory(profile="fixed:200")
    async with client_for(server) as gw:
        runner = make_runner(gw, tasks(200), concurrency=20)
        task = asyncio.create_task(runner.run())
        while runner.in_flight < 20:  # a full wave in flight (state, not time)
            await asyncio.sleep(0.005)
        runner.cancel()
        await asyncio.wait_for(task, 30)
    assert runner.in_flight == 0 and runner.retry_waiting == 0
    assert all(a.state in FINAL_STATES for a in runner.records)
    assert runner.counts["cancelled"] > 100
    assert 0 < runner.counts["succeeded"] < 100
    assert sum(runner.counts.values()) == 200


async def test_cancel_one_agent_in_flight(sim_factory):
    server = sim_factory(profile="fixed:300")
    async with client_for(server) as gw:
        runner = make_runner(gw, tasks(5), concurrency=5)
        task = asyncio.create_task(runner.run())
        while not runner.records[2].attempts:  # in flight (after the key-model's first answer)
            await asyncio.sleep(0.01)
        runner.cancel_agent(2)
        await asyncio.wait_for(task, 5)
    assert [a.state for a in runner.records].count("cancelled") == 1
    assert runner.records[2].state == "cancelled"
    assert runner.records[2].attempts[-1].outcome == "cancelled"


@pytest.mark.slow
async def test_concurrency_change_mid_run_takes_effect(sim_factory):
    server = sim_factory(profile="fixed:100")
    samples: list[tuple[float, int]] = []
    async with client_for(server) as gw:
        runner = make_runner(gw, tasks(400), concurrency=5)
        runner.consumers.append(lambda e: samples.append((e.at_ms, runner.in_flight)))
        task = asyncio.create_task(runner.run())
        while runner.done < 20:  # a few waves at 5 (state, not time)
            await asyncio.sleep(0.005)
        changed_at = runner.now_ms()
        runner.set_concurrency(40)
        await asyncio.wait_for(task, 20)
    before = [n for t, n in samples if t < changed_at]
    after = [n for t, n in samples if t > changed_at + 150]
    assert max(before) == 5
    assert max(after) == 40


@pytest.mark.slow
async def test_pause_stops_dispatch_and_resume_continues(sim_factory):
    server = sim_factory(profile="fixed:50")
    async with client_for(server) as gw:
        runner = make_runner(gw, tasks(200), concurrency=10)
        task = asyncio.create_task(runner.run())
        while runner.done < 10:  # under way (state, not time)
            await asyncio.sleep(0.005)
        runner.pause()
        sends = sum(len(ag.attempts) for ag in runner.records)  # attempts exist from launch
        while runner.in_flight:  # in-flight calls drain; nothing new goes out
            await asyncio.sleep(0.005)
        # wake the dispatcher and wait until it has run a round and gone back to waiting
        # (it clears the event before it waits): that round, paused, sent nothing
        runner._wake.set()
        while runner._wake.is_set():
            await asyncio.sleep(0)
        assert sum(len(ag.attempts) for ag in runner.records) == sends
        runner.resume()
        await asyncio.wait_for(task, 30)
    assert runner.counts["succeeded"] == 200


async def test_a_refused_key_is_never_retried_and_dispatch_waits_for_a_usable_one(sim_factory):
    server = sim_factory(profile="fixed:10", keys=["sk-the-only-good-key-0123456789"])
    async with client_for(server, keys=["sk-wrong-key-000000000000000000"]) as gw:
        runner = make_runner(gw, tasks(3))
        run = asyncio.create_task(runner.run())
        while not (runner.waiting_for_keys or "").startswith("no usable key on sim"):
            await asyncio.sleep(0.01)
        assert runner.in_flight == 0 and runner.counts["failed"] == 0
        runner.cancel()  # an operator gives up: every task stays resumable
        await asyncio.wait_for(run, 10)
    attempts = [x for a in runner.records for x in a.attempts]
    assert len(attempts) == 1  # the refused key took one call, never a second
    assert attempts[0].error_class == "auth" and attempts[0].status_code == 401
    assert "sk-wrong-key-000000000000000000" not in (attempts[0].error_message or "")
    assert runner.counts["cancelled"] == 3


async def test_bad_request_is_never_retried(sim_factory):
    server = sim_factory(profile="fixed:10")
    async with client_for(server) as gw:
        runner = make_runner(gw, [Task(id="t", prompt="x", max_tokens=10**6 - 1)])
        runner.records[0].model = ""  # the simulator answers 400: model and messages required
        await runner.run()
    a = runner.records[0]
    assert a.state == "failed" and a.error_class == "bad_request" and len(a.attempts) == 1


async def test_server_errors_fall_back_to_next_model(sim_factory):
    server = sim_factory(profile="fixed:10", rate_503=1.0)
    routing = RoutingConfig(fallback={"deepseek-v3.2": ["kimi-k2.5"]})
    rec = Recorder()
    async with client_for(server) as gw:
        runner = make_runner(gw, tasks(2), retry=RetryConfig(max_attempts=2, base_backoff_s=0.01),
                             routing=routing, consumers=[rec])
        await runner.run()
    a = runner.records[0]
    assert a.state == "failed" and a.error_class == "server"
    assert [x.model for x in a.attempts] == ["deepseek-v3.2"] * 2 + ["kimi-k2.5"] * 2
    assert len(rec.kinds(ev.FALLBACK)) == 2


async def test_fallback_succeeds_when_first_model_keeps_failing(sim_factory):
    server = sim_factory(profile="fixed:10", rate_503=0.6)
    async with client_for(server) as gw:
        runner = make_runner(gw, tasks(60), retry=RetryConfig(max_attempts=2, base_backoff_s=0.01))
        await runner.run()
    fell_back = [a for a in runner.records if a.state == "succeeded" and a.model == "kimi-k2.5"]
    assert fell_back, "some tasks should have succeeded on the fallback model"
    assert all(len(a.attempts) == 3 or len(a.attempts) == 4 for a in fell_back)


async def test_cut_streams_are_classified_and_retried(sim_factory):
    server = sim_factory(profile="fixed:40", rate_cut=0.3)
    async with client_for(server) as gw:
        runner = make_runner(gw, tasks(60), retry=RetryConfig(max_attempts=6, base_backoff_s=0.01))
        await runner.run()
    cut = [x for a in runner.records for x in a.attempts if x.outcome == "error"]
    assert cut and all(x.error_class == "connection" for x in cut)
    assert runner.counts["succeeded"] == 60


@pytest.mark.slow
async def test_hang_past_timeout_is_a_timeout(sim_factory):
    server = sim_factory(profile="fixed:10", rate_hang=1.0, hang_s=30)
    async with client_for(server, timeout_s=0.3) as gw:
        runner = make_runner(gw, tasks(2), retry=RetryConfig(max_attempts=1),
                             routing=RoutingConfig(fallback={}))
        await runner.run()
    for a in runner.records:
        assert a.state == "failed" and a.error_class == "timeout"
        call = a.attempts[0]
        # far short of the 30 s hang: the timeout ended it, not the server
        assert 0 < call.latency_ms < 10_000
        # and no earlier than the 0.3 s timeout, which also covers the client's own delay
        # before the wire — booked as queue time, not latency (21 ms of it on one loaded
        # core made the latency 279 ms): together they are at least the timeout, however
        # slow the machine
        assert call.queue_ms + call.latency_ms >= 299


async def test_missing_usage_is_estimated_and_marked(sim_factory):
    server = sim_factory(profile="fixed:10", usage_mode="none")
    async with client_for(server) as gw:
        sent = tasks(3)
        runner = make_runner(gw, sent)
        await runner.run()
    for a, task in zip(runner.records, sent, strict=True):
        assert a.state == "succeeded" and a.usage_estimated
        assert a.tokens_out == estimate_tokens(a.response_text)
        # the chat template's tokens count: 4 per message and 3 for the reply's opening
        messages = task.messages()
        assert a.tokens_in == (sum(estimate_tokens(m["content"]) for m in messages)
                               + 4 * len(messages) + 3)


def test_token_estimates_calibrate_to_the_usage_a_gateway_reported():
    """A llama.cpp server counted 358 prompt tokens where characters / 4 said 212: once a
    model's usage has been reported in the run, estimates scale to it."""
    from swarm_tui.gateway.tokens import TokenEstimator, raw_prompt_tokens

    messages = [{"role": "system", "content": "s" * 100}, {"role": "user", "content": "u" * 700}]
    est = TokenEstimator()
    raw_in, _ = est.estimate("llama", messages, "x" * 400)
    assert raw_in == raw_prompt_tokens(messages) == (
        estimate_tokens("s" * 100) + estimate_tokens("u" * 700) + 8 + 3)
    est.learn("llama", messages, "x" * 400, tokens_in=358, tokens_out=130)
    t_in, t_out = est.estimate("llama", messages, "x" * 400)
    assert (t_in, t_out) == (358, 130)
    assert est.estimate("other", messages, "x" * 400)[0] == raw_in  # per model


async def test_usage_on_the_finish_chunk_is_accepted(sim_factory):
    server = sim_factory(profile="fixed:10", usage_mode="inline", cached_fraction=0.5)
    async with client_for(server) as gw:
        runner = make_runner(gw, tasks(3))
        await runner.run()
    for a in runner.records:
        assert not a.usage_estimated and a.tokens_out > 0
        assert a.cached_in == a.tokens_in // 2


async def test_non_streaming_mode(sim_factory):
    server = sim_factory(profile="fixed:30")
    async with client_for(server, stream=False) as gw:
        runner = make_runner(gw, tasks(10))
        await runner.run()
    for a in runner.records:
        assert a.state == "succeeded" and a.tokens_out > 0 and not a.usage_estimated
        assert a.ttft_ms == a.latency_ms  # one clock reading: equal, not "close"


async def test_explicit_task_model_wins_over_routing(sim_factory):
    server = sim_factory(profile="fixed:10")
    async with client_for(server) as gw:
        long_prompt = "summarise the clause " * 500  # ~1,500 tokens by any count
        runner = make_runner(gw, [Task(id="a", prompt=long_prompt, model="gpt-4.1"),
                                  Task(id="b", prompt=long_prompt), Task(id="c", prompt="hi")])
        await runner.run()
    assert [a.model for a in runner.records] == ["gpt-4.1", "kimi-k2.5", "deepseek-v3.2"]


async def test_latency_starts_when_the_request_hits_the_wire(sim_factory):
    """The aiohttp trace hook moves sent_at to the socket write; the gap is booked as queue."""

    class Sink:
        def on_first_token(self, at: float) -> None:
            self.first = at

        def on_progress(self, chars: int, at: float) -> None:
            self.chars = chars

    server = sim_factory(profile="fixed:50")
    async with client_for(server) as gw:
        slot = gw.pick_key()
        msgs = [{"role": "user", "content": "hi"}]
        t0 = time.perf_counter()
        results = await asyncio.gather(*(gw.complete(slot, "m", msgs, 16, None, Sink())
                                         for _ in range(30)))
        whole_ms = (time.perf_counter() - t0) * 1000.0
    for res in results:
        assert res.error is None
        assert res.send_delay_ms > 0  # the hook fired: the SDK's build time is not latency
        assert res.latency_ms >= 45  # the server's 50 ms
        # the client's delay and the latency are disjoint parts of the call (relations,
        # not absolute times: counted in both, they would exceed the whole burst's time)
        assert res.send_delay_ms + res.latency_ms <= whole_ms + 1.0
    # a burst of 30: the later requests waited on the client before reaching the wire
    assert max(r.send_delay_ms for r in results) > min(r.send_delay_ms for r in results)


@pytest.mark.slow
async def test_long_streams_emit_throttled_progress_events(sim_factory):
    server = sim_factory(profile="fixed:2600", chunks=40)
    rec = Recorder()
    async with client_for(server) as gw:
        runner = make_runner(gw, tasks(3, max_tokens=400), consumers=[rec])
        await runner.run()
    progress = rec.kinds(ev.PROGRESS)
    per_agent = Counter(e[1] for e in progress)
    # ~1.7 s of streaming after the first token: one or two events each, never one per chunk
    assert set(per_agent) == {"t0", "t1", "t2"}
    assert all(1 <= n <= 2 for n in per_agent.values())


def test_cancel_on_uvloop_stops_retry_timers_and_the_run_ends(sim_factory):
    """The console's engine runs on uvloop, whose timer handles are not asyncio's: a
    cancel left retry timers armed, they fired later and the run never ended."""
    import uvloop

    server = sim_factory(profile="fixed:30", rate_503=0.6)

    async def scenario() -> tuple[int, dict[str, int]]:
        async with client_for(server) as gw:
            runner = make_runner(gw, tasks(200), concurrency=40, retry=RetryConfig(
                base_backoff_s=2.0, max_backoff_s=4.0, max_attempts=5))
            run = asyncio.create_task(runner.run())
            while runner.retry_waiting < 5:  # agents sitting in their retry waits
                await asyncio.sleep(0.01)
            timers = [a.handle for a in runner.records
                      if a.state == "retrying" and a.handle is not None]
            runner.cancel()
            await asyncio.wait_for(run, 30)
            # every retry timer disarmed (a stale one would fire later and count its wait
            # off twice) — checked on the handles, not by sleeping past the waits
            assert timers and all(t.cancelled() for t in timers)
            return runner.retry_waiting, runner.counts

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as r:
        waiting, counts = r.run(scenario())
    assert waiting == 0
    assert counts["cancelled"] > 0 and sum(counts.values()) == 200


async def test_a_fault_of_ours_after_the_send_is_a_failed_call_on_record(sim_factory,
                                                                         monkeypatch):
    """Fault injection: reading an answer raises (a lone surrogate once did, in token
    counting). The call was sent and may be paid: booked failed with what went wrong —
    not cancelled with no call on record, which `resume` would send again — its key slot
    freed, the rest of the run unharmed."""
    from swarm_tui.gateway.tokens import TokenEstimator

    server = sim_factory(profile="fixed:20")
    learn = TokenEstimator.learn

    def faulty(self, model, messages, text, *a, **kw):
        if "[fault]" in messages[-1]["content"]:
            raise UnicodeEncodeError("utf-8", "\ud83d", 0, 1, "surrogates not allowed")
        return learn(self, model, messages, text, *a, **kw)

    monkeypatch.setattr(TokenEstimator, "learn", faulty)
    work = [Task(id=f"t{i}", prompt=("[fault] " if i % 10 == 3 else "") + f"task {i}")
            for i in range(40)]
    details: list[str | None] = []
    async with client_for(server) as gw:
        runner = make_runner(gw, work, concurrency=8,
                             consumers=[lambda e: details.append(e.detail)])
        await asyncio.wait_for(runner.run(), 60)
        assert sum(s.in_flight for s in gw.pool.slots) == 0  # every key slot given back
    assert runner.counts == {"succeeded": 36, "failed": 4, "cancelled": 0}
    for r in runner.records:
        if r.state == "failed":
            assert "[fault]" in work[r.index].prompt and len(r.attempts) == 1
            assert r.attempts[0].outcome == "error" and r.error_class == "other"
            assert "internal error around the call: UnicodeEncodeError" in r.error_message
    assert sum("booked failed, not resent" in (d or "") for d in details) == 4


async def test_a_call_waiting_for_a_connection_when_the_lease_lapses_is_not_sent(sim_factory):
    """A worker's send permit (its lease) lapses while a launched call waits for a
    connection — a process stopped past its lease, then resumed, is that case at its
    worst. The call is asked once it has its connection and is held back: nothing goes
    out until the permit holds again (another worker may have taken the batch over: sent,
    it could be paid twice), then it goes, once."""
    from swarm_tui.core.states import PERMIT_HOLD
    from tests.conftest import TEST_KEY, make_client

    sim = sim_factory(profile="fixed:200")
    # two keys: each one's first call is its lone probe, so two calls are launched at once
    gw = make_client(sim, keys=[TEST_KEY, TEST_KEY.replace("0123", "9876")], pool=2)
    assert gw.wire is not None
    gw.wire.pool = 1  # … and one connection carries them: the second waits for it
    lapsed = asyncio.Event()

    def first_token(e: ev.Event) -> None:
        if e.kind == ev.FIRST_TOKEN:
            lapsed.set()  # the first call is on the wire: now the lease lapses

    runner = make_runner(gw, tasks(2), concurrency=2, consumers=[first_token])
    runner.send_permit = lambda: "lease lapsed" if lapsed.is_set() else None
    try:
        run = asyncio.create_task(runner.run())
        await until(lambda: PERMIT_HOLD in runner.holds or run.done())
        assert not run.done(), "the second call went out past the lease"
        # the first call's answer came; the second was held at its connection, unsent
        await until(lambda: sum(runner.counts.values()) >= 1 and runner.in_flight == 0)
        assert sim.app.stats["requests"] == 1, dict(sim.app.stats)
        waiting = [a for a in runner.records if a.state not in FINAL_STATES]
        assert len(waiting) == 1 and waiting[0].attempts == []  # taken back, not booked
        lapsed.clear()  # renewed
        runner.release(PERMIT_HOLD, "lease renewed")
        await asyncio.wait_for(run, 30)
    finally:
        await gw.aclose()
    assert runner.counts["succeeded"] == 2
    assert sim.app.stats["requests"] == 2  # each task sent once
    assert sorted(len(a.attempts) for a in runner.records) == [1, 1]
