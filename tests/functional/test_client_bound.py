"""When the client is the bottleneck its latency is not the gateway's: the run is marked
client-bound, the SLA says inconclusive instead of breached, and a canary's latency gates
go inconclusive — a canary is never aborted for the client's own load (issue 16)."""

from __future__ import annotations

import threading

import pytest

from swarm_tui.canary.analysis import FAIL, INCONCLUSIVE, PASS, BucketFigures, evaluate
from swarm_tui.core.summary import CLIENT_BOUND_MS, Percentiles, summarize
from swarm_tui.engine.routing import BASELINE, CANDIDATE
from swarm_tui.settings.sections import CanaryGates, SlaConfig
from tests.conftest import client_for, make_runner, tasks


@pytest.mark.slow
async def test_a_starved_engine_loop_marks_the_run_client_bound_not_breached(sim_factory):
    server = sim_factory(profile="fixed:50")
    stop = threading.Event()

    def hog() -> None:  # C-level work that holds the GIL for tens of ms at a time
        while not stop.is_set():
            sum(range(3_000_000))

    thread = threading.Thread(target=hog, daemon=True)
    async with client_for(server) as gw:
        runner = make_runner(gw, tasks(300), concurrency=20)
        thread.start()
        try:
            await runner.run()
        finally:
            stop.set()
            thread.join()
    lag = runner.loop_lag.run_p95_ms()
    assert lag is not None and lag >= CLIENT_BOUND_MS, lag
    # over the SLA by less than the client's own delay: inconclusive, never "breached"
    # the SLA just under what was measured: the client's delay can explain the difference
    p95 = sorted(a.latency_ms for a in runner.records)[int(0.95 * 300) - 1]
    s = summarize(runner.records, run_id="r", sla=SlaConfig(p95_ms=p95 - 1),
                  wall_ms=runner.wall_ms, client_lag=(lag, runner.loop_lag.run_max_ms()))
    assert s.client_bound
    assert s.sla is not None and not s.sla.met and not s.sla.breaches
    assert s.sla.inconclusive and s.sla.inconclusive.startswith("client-bound")
    # far over it (more than the client's delay can explain): a breach, bound or not
    far = summarize(runner.records, run_id="r", sla=SlaConfig(p95_ms=max(1.0, p95 - lag - 20)),
                    wall_ms=runner.wall_ms, client_lag=(lag, runner.loop_lag.run_max_ms()))
    assert far.sla is not None and far.sla.breaches and not far.sla.inconclusive


def _figures(p95: float, n: int = 500) -> BucketFigures:
    # evenly spread samples whose 95th percentile is `p95` (the gates test the samples)
    lat = [p95 * (i + 1) / (0.95 * n) for i in range(n)]
    return BucketFigures(calls=n, call_errors=0, errors={}, tasks=n, succeeded=n,
                         latency_ms=Percentiles.of(lat), ttft_ms=Percentiles(), latencies=lat)


def test_the_canary_latency_gate_is_inconclusive_while_the_client_is_bound():
    stage = {BASELINE: _figures(280), CANDIDATE: _figures(362)}
    gates = CanaryGates(p95_ms=350, max_p95_ratio=1.2)
    idle = {v.gate: v for v in evaluate(stage, gates, 100, client_lag_ms=3.0)}
    assert idle["p95"].result == FAIL and idle["p95-ratio"].result == FAIL
    bound = {v.gate: v for v in evaluate(stage, gates, 100, client_lag_ms=45.0)}
    assert bound["p95"].result == INCONCLUSIVE and "client-bound" in bound["p95"].detail
    assert bound["p95-ratio"].result == INCONCLUSIVE
    assert bound["success"].result != INCONCLUSIVE  # only latency is the client's
    # a candidate slower than the gate by more than the client's delay fails regardless
    slow = {BASELINE: _figures(280), CANDIDATE: _figures(500)}
    verdicts = {v.gate: v for v in evaluate(slow, gates, 100, client_lag_ms=45.0)}
    assert verdicts["p95"].result == FAIL
    # the ratio too decides under load: only a difference the delay could explain is
    # inconclusive (a 2.03x slower candidate was never failed, an equal one never passed)
    assert verdicts["p95-ratio"].result == FAIL, verdicts["p95-ratio"].detail
    twice = {BASELINE: _figures(144), CANDIDATE: _figures(292)}
    verdicts = {v.gate: v for v in evaluate(twice, gates, 100, client_lag_ms=25.0)}
    assert verdicts["p95-ratio"].result == FAIL
    same = {BASELINE: _figures(280), CANDIDATE: _figures(280)}
    verdicts = {v.gate: v for v in evaluate(same, gates, 100, client_lag_ms=45.0)}
    assert verdicts["p95-ratio"].result == PASS, verdicts["p95-ratio"].detail


def test_a_call_ends_when_its_last_bytes_left_the_socket_never_outside_send_and_handled():
    from swarm_tui.gateway.client import CallResult

    res = CallResult(sent_at=10.0, wire_end=10.2)
    res.end_at_wire(10.5)  # the engine got to the answer 300 ms after it was read
    assert res.latency_ms == pytest.approx(200.0) and res.handling_ms == 0.0
    late = CallResult(sent_at=10.0, wire_end=10.6)  # a later answer's bytes: ignored
    late.end_at_wire(10.5)
    assert late.latency_ms == pytest.approx(500.0)
    unknown = CallResult(sent_at=10.0)  # no wire time (another transport)
    unknown.end_at_wire(10.5)
    assert unknown.latency_ms == pytest.approx(500.0)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.slow
async def test_wire_times_are_taken_for_every_call_and_bound_the_latency(sim_factory, stream):
    """Through the real SDK and aiohttp: each call's last bytes were timed off the socket,
    between its send and the moment the engine handled them, while a thread hogs the GIL
    (the engine then gets to an answer later than it was read)."""
    import asyncio
    import time

    server = sim_factory(profile="fixed:60")
    stop = threading.Event()

    def hog() -> None:
        while not stop.is_set():
            sum(range(2_000_000))

    thread = threading.Thread(target=hog, daemon=True)
    async with client_for(server, stream=stream) as gw:
        class Sink:
            def on_first_token(self, at: float) -> None: ...

            def on_progress(self, chars: int, at: float) -> None: ...

        async def one():
            slot = gw.pick_key("deepseek-v3.2")
            assert slot is not None
            handled_before = time.perf_counter()
            res = await gw.complete(slot, "deepseek-v3.2",
                                    [{"role": "user", "content": "hi"}], 16, None, Sink())
            return res, handled_before

        first = await one()  # a key-model's first call goes alone (it learns the quota)
        thread.start()
        try:
            results = [first, *await asyncio.gather(*(one() for _ in range(40)))]
        finally:
            stop.set()
            thread.join()
    for res, _ in results:
        assert res.error is None
        assert res.wire_end > res.sent_at  # timed off the socket, after the send
        assert res.handling_ms >= 0.0
        assert res.ttft_ms is not None and 0.0 < res.ttft_ms <= res.latency_ms
    # the gateway's time, not ours: ≥ the server's 60 ms (what it was asked to take)
    assert min(r.latency_ms for r, _ in results) >= 55.0
