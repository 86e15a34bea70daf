"""The simulator speaks OpenAI over loopback; its profiles match the team's measurements."""

from __future__ import annotations

import random

import httpx2
import openai
import pytest

from swarm_tui.core.summary import nearest_rank
from swarm_tui.sim.profiles import DIRECT, GATEWAY, get_profile
from swarm_tui.token_count import estimate_tokens
from tests.conftest import TEST_KEY


@pytest.mark.parametrize(("profile", "expected"), [
    (GATEWAY, (180, 278, 412)),
    (DIRECT, (420, 720, 1100)),
])
def test_profile_quantiles_match_the_measurement(profile, expected):
    rng = random.Random(5)
    values = sorted(profile.sample_ms(rng) for _ in range(50_000))
    for p, want in zip((50, 95, 99), expected, strict=True):
        got = nearest_rank(values, p)
        assert abs(got - want) / want < 0.04, (p, got, want)


def test_fixed_profile_and_bad_specs():
    assert get_profile("fixed:200").sample_ms(random.Random()) == 200
    for bad in ("fixed:0", "fixed:x", "nope"):
        with pytest.raises(ValueError):
            get_profile(bad)


def test_models_auth_and_streaming_usage(sim_factory):
    server = sim_factory(profile="fixed:20", cached_fraction=0.25)
    r = httpx2.get(server.base_url + "/models")
    assert r.status_code == 401
    client = openai.OpenAI(api_key=TEST_KEY, base_url=server.base_url, max_retries=0)
    assert {m.id for m in client.models.list()} >= {"kimi-k2.5", "deepseek-v3.2"}
    stream = client.chat.completions.create(
        model="kimi-k2.5", messages=[{"role": "user", "content": "xy " * 400}], max_tokens=100,
        stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    usage = chunks[-1].usage
    assert usage is not None and chunks[-1].choices == []
    # counted as an o200k-like tokenizer would (the default), plus the template's 4
    assert usage.prompt_tokens == estimate_tokens("xy " * 400) + 4
    assert 85 <= usage.completion_tokens <= 100
    assert usage.prompt_tokens_details.cached_tokens == int(usage.prompt_tokens * 0.25)
    assert all(c.model == "kimi-k2.5" and c.id == chunks[0].id for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # the answer is as long as the tokens it bills, by the same count (±1 for the cut)
    assert abs(estimate_tokens(text) - usage.completion_tokens) <= 1
    plain = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=10)
    assert plain.usage.completion_tokens <= 10 and plain.choices[0].finish_reason == "stop"


def test_per_key_rpm_limit_answers_429_with_headers(sim_factory):
    server = sim_factory(profile="fixed:1", rpm_per_key=3)
    client = openai.OpenAI(api_key=TEST_KEY, base_url=server.base_url, max_retries=0)
    other = openai.OpenAI(api_key=TEST_KEY + "x", base_url=server.base_url, max_retries=0)
    msgs = [{"role": "user", "content": "hi"}]
    for _ in range(3):
        raw = client.chat.completions.with_raw_response.create(model="m", messages=msgs)
    assert raw.headers["x-ratelimit-limit-requests"] == "3"
    assert raw.headers["x-ratelimit-remaining-requests"] == "0"
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="m", messages=msgs)
    headers = info.value.response.headers
    assert 0 < float(headers["retry-after-ms"]) <= 60_000
    assert int(headers["retry-after"]) >= 1
    other.chat.completions.create(model="m", messages=msgs)  # the limit is per key


def test_settings_endpoint_and_stats(sim_factory):
    server = sim_factory(profile="fixed:1")
    r = httpx2.post(server.base_url.replace("/v1", "/sim/settings"), json={"rate_503": 1.0})
    assert r.status_code == 200 and r.json()["rate_503"] == 1.0
    bad = httpx2.post(server.base_url.replace("/v1", "/sim/settings"), json={"rate_503": 7})
    assert bad.status_code == 400
    client = openai.OpenAI(api_key=TEST_KEY, base_url=server.base_url, max_retries=0)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    stats = httpx2.get(server.base_url.replace("/v1", "/sim/stats")).json()
    assert stats["503"] == 1 and stats["requests"] == 1
