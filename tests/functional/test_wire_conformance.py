"""The wire client and the openai SDK path, call for call: the same answer, the same
failure class, status, Retry-After, usage and headers for every fault the simulator can
script — and against llmock, a quota server we did not write (issue 34).

Each path gets its own simulator with the same seed, so each sees the same dice."""

from __future__ import annotations

from typing import Any

import pytest

from swarm_tui.gateway.client import GatewayClient
from tests.conftest import TEST_KEY, free_port

MESSAGES = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": "요약해 주세요: the quarterly report, 第三季度"}]


class Sink:
    def __init__(self) -> None:
        self.first: float | None = None
        self.chars = 0

    def on_first_token(self, at: float) -> None:
        self.first = at

    def on_progress(self, chars: int, at: float) -> None:
        self.chars = chars


def what_is_stored(res: Any, sink: Sink) -> dict[str, Any]:
    """What the store and the engine take from one call (times aside)."""
    err = res.error
    return {
        "error_class": err.error_class if err else None,
        "status": err.status_code if err else res.status_code,
        "retry_after_s": round(err.retry_after_s, 2) if err and err.retry_after_s else None,
        "finish_reason": res.finish_reason,
        "tokens": (res.tokens_in, res.tokens_out, res.cached_in, res.usage_estimated),
        "text_chars": len(res.text),
        "streamed_chars": sink.chars,
        "first_token": sink.first is not None,
        "ttft": res.ttft_ms is not None,
        "response_id": res.response_id is not None,
        "response_model": res.response_model,
        "headers": sorted((res.headers or (err.headers if err else None) or {}).items()),
        "error_headers": sorted((err.headers or {}).items()) if err else None,
    }


async def one_call(base_url: str, transport: str, *, stream: bool = True,
                   timeout_s: float = 10.0, key: str = TEST_KEY,
                   messages: list[dict[str, str]] | None = None,
                   model: str = "deepseek-v3.2") -> dict[str, Any]:
    gw = GatewayClient("gw", base_url, [(key, None)], pool=4, timeout_s=timeout_s,
                       stream=stream, transport=transport)  # type: ignore[arg-type]
    try:
        slot = gw.pick_key(model)
        assert slot is not None
        sink = Sink()
        res = await gw.complete(slot, model, MESSAGES if messages is None else messages,
                                64, None, sink)
        return what_is_stored(res, sink)
    finally:
        await gw.aclose()


# scenario: (simulator settings, what a streamed call must come to: error class, status)
SCENARIOS: dict[str, tuple[dict[str, Any], tuple[str | None, int | None]]] = {
    "ok": ({}, (None, 200)),
    "usage on the finish chunk": ({"usage_mode": "inline"}, (None, 200)),
    "usage absent": ({"usage_mode": "none"}, (None, 200)),
    "cached input, DeepSeek style": ({"cached_fraction": 0.5, "usage_style": "deepseek"},
                                     (None, 200)),
    "stream ignored": ({"ignore_stream": True}, (None, 200)),
    "in-stream 503": ({"rate_stream_error": 1.0}, ("server", 503)),
    "in-stream 429": ({"rate_stream_error": 1.0, "stream_error_code": 429},
                      ("rate_limited", 429)),
    "malformed chunk": ({"rate_malformed": 1.0}, ("protocol", None)),
    "truncated stream": ({"rate_cut": 1.0}, ("connection", None)),
    "429 with Retry-After": ({"rate_429": 1.0, "retry_after_s": 2.5}, ("rate_limited", 429)),
    "a model's 429, no Retry-After": ({"model_429": {"deepseek-v3.2": 1.0}},
                                      ("rate_limited", 429)),
    "503": ({"rate_503": 1.0}, ("server", 503)),
    "quota headers": ({"rpm_per_key": 600}, (None, 200)),
    "quota spent": ({"rpm_per_key": 60, "quota_burst": 1}, ("rate_limited", 429)),
    "key refused": ({"keys": ["sk-the-only-key-it-takes-000000000"]}, ("auth", 401)),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
async def test_the_wire_client_stores_what_the_sdk_path_stores(sim_factory, scenario, stream):
    faults, expect = SCENARIOS[scenario]
    settings = {"profile": "fixed:5", "seed": 11, **faults}
    seen = {}
    for transport in ("wire", "aiohttp"):
        sim = sim_factory(**settings)
        calls = 2 if scenario == "quota spent" else 1  # the second finds the bucket empty
        for _ in range(calls):
            seen[transport] = await one_call(sim.base_url, transport, stream=stream)
        if scenario == "quota spent":  # the refill's wait depends on the time between calls
            call = seen[transport]
            call["retry_after_s"] = call["retry_after_s"] is not None
            call["headers"] = [k for k, _ in call["headers"]]
            call["error_headers"] = [k for k, _ in call["error_headers"] or ()]
    assert seen["wire"] == seen["aiohttp"], scenario
    got = seen["wire"]
    if stream:  # and what both said is what the scenario scripted (not two equal blanks)
        assert (got["error_class"], got["status"]) == expect, got
    if got["error_class"] is None:
        assert got["tokens"][1] > 0 and got["finish_reason"] == "stop"
    if scenario == "429 with Retry-After":
        assert got["retry_after_s"] == 2.5
    if scenario == "usage absent":
        assert got["tokens"][3] is True  # estimated, and marked so
    if scenario == "cached input, DeepSeek style":
        assert got["tokens"][2] > 0
    if scenario.startswith("quota"):
        assert any(str(h).startswith(("x-ratelimit-", "('x-ratelimit-"))
                   for h in got["headers"]), got


async def test_a_bad_request_and_a_timeout_alike_on_both_paths(sim_factory):
    for settings, kw, expect in (
            ({}, {"messages": []}, "bad_request"),  # the simulator's 400
            ({"rate_hang": 1.0, "hang_s": 30}, {"timeout_s": 0.3}, "timeout")):
        seen = {}
        for transport in ("wire", "aiohttp"):
            sim = sim_factory(profile="fixed:5", seed=3, **settings)
            seen[transport] = await one_call(sim.base_url, transport, **kw)
        assert seen["wire"] == seen["aiohttp"] and seen["wire"]["error_class"] == expect


@pytest.mark.slow
async def test_llmock_answers_and_its_quota_alike_on_both_paths():
    """llmock (a server we did not write): a real answer, then its per-key quota spent —
    the 429, its Retry-After and x-ratelimit-* headers read the same on both paths."""
    from tests.functional.test_rate_limits import _llmock

    seen: dict[str, list[dict[str, Any]]] = {}
    for transport in ("wire", "aiohttp"):
        port = free_port()
        proc = _llmock(port, "--rpm", "1", "--latency-ms", "5", "--tool-mode", "off")
        try:
            url = f"http://127.0.0.1:{port}/v1"
            seen[transport] = [await one_call(url, transport, key="sk-llmock-0000000000000001")
                               for _ in range(2)]
        finally:
            proc.terminate()
            proc.wait(10)
    for got in seen.values():  # time-dependent figures: the refill's wait
        for call in got:
            call["retry_after_s"] = call["retry_after_s"] is not None
            call["headers"] = [k for k, _ in call["headers"]]
            call["error_headers"] = call["error_headers"] and [k for k, _ in
                                                               call["error_headers"]]
            call["tokens"] = call["tokens"][3]  # llmock's text differs per call
            call["text_chars"] = call["streamed_chars"] = call["response_model"] = None
    assert seen["wire"] == seen["aiohttp"]
    first, second = seen["wire"]
    assert first["error_class"] is None and second["error_class"] == "rate_limited"
    assert second["retry_after_s"] and any(h.startswith("x-ratelimit") for h in
                                           second["error_headers"])


async def test_a_wait_for_a_connection_is_the_clients_delay_not_the_gateways_latency(
        sim_factory):
    """With one connection for two calls, the second waits for the first's ~200 ms call
    before its request goes out. That wait is the client's (booked as queue time by the
    engine), and the latency is the gateway's 200 ms — not 400."""
    import asyncio

    sim = sim_factory(profile="fixed:200")
    keys = [(TEST_KEY, None), (TEST_KEY.replace("0123", "9876"), None)]
    gw = GatewayClient("gw", sim.base_url, keys, pool=2, timeout_s=10)
    assert gw.wire is not None
    gw.wire.pool = 1  # a call on each key, one connection (the gateway's) to carry them
    try:
        async def call():
            slot = gw.pick_key("deepseek-v3.2")
            assert slot is not None
            return await gw.complete(slot, "deepseek-v3.2", MESSAGES, 16, None, Sink())

        first, second = await asyncio.gather(call(), call())
    finally:
        await gw.aclose()
    assert first.error is None and second.error is None
    waited, went = sorted((first, second), key=lambda r: r.send_delay_ms)[::-1]
    # the second waited out the first's call (the server holds each 200 ms) …
    assert waited.send_delay_ms - went.send_delay_ms >= 150, (
        waited.send_delay_ms, went.send_delay_ms)
    # … and its latency is its own call's, not the wait too (~200 of ~400 ms; booked as
    # latency, the wait made it the whole): bounds that hold at any machine's speed
    assert 150 <= waited.latency_ms < 0.75 * (waited.latency_ms + waited.send_delay_ms), (
        waited.latency_ms, waited.send_delay_ms)


@pytest.mark.parametrize("transport", ["wire", "aiohttp"])
async def test_a_call_whose_route_moved_while_it_waited_for_a_connection_is_not_sent(
        sim_factory, transport):
    """A canary aborted while a first call waits for a connection: the call is asked, once
    it has one and before its headers go out, whether it may still go — and is held back
    (nothing sent, no error, its key left to the engine to release) so the engine routes
    it again. On the wire client and the SDK's aiohttp transport alike (one key, one
    connection: the second call waits for the first's); the gateway never sees it."""
    import asyncio

    sim = sim_factory(profile="fixed:200")
    gw = GatewayClient("gw", sim.base_url, [(TEST_KEY, None)], pool=2, timeout_s=10,
                       transport=transport)  # type: ignore[arg-type]
    if gw.wire is not None:
        gw.wire.pool = 1
    gw.pool_size = 1  # (the SDK's session, built at its first call)
    moved = asyncio.Event()  # set once the first call holds the one connection
    asked: list[bool] = []

    def gate() -> bool:
        asked.append(moved.is_set())
        return not moved.is_set()

    class Moving(Sink):
        def on_first_token(self, at: float) -> None:
            super().on_first_token(at)
            moved.set()

    try:
        warm = gw.pick_key("deepseek-v3.2")  # a key's first call is its lone probe
        assert warm is not None
        assert (await gw.complete(warm, "deepseek-v3.2", MESSAGES, 16, None, Sink())).error \
            is None
        slots = [gw.pick_key("deepseek-v3.2"), gw.pick_key("deepseek-v3.2")]
        assert slots[0] is slots[1] is not None
        first = asyncio.create_task(gw.complete(slots[0], "deepseek-v3.2", MESSAGES, 16,
                                                None, Moving(), gate))
        await moved.wait()
        second = await gw.complete(slots[1], "deepseek-v3.2", MESSAGES, 16, None, Sink(),
                                   gate)
        first_res = await first
    finally:
        await gw.aclose()
    assert first_res.error is None and not first_res.held_back
    assert second.held_back and second.error is None, second.error
    assert asked == [False, True], asked  # asked at each call's send, the second said no
    assert sim.app.stats["requests"] == 2, dict(sim.app.stats)  # the probe and the first
    # the held-back call's key is not ended by the client (the engine releases it once)
    assert slots[0].in_flight == 1
