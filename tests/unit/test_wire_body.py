"""A call's JSON body (gateway/wire.py): an all-ASCII one goes through json's faster ASCII
encoder, and must be the very bytes the UTF-8 encoder writes — text outside ASCII as
UTF-8, never as \\u escapes (a Korean prompt would double on the wire)."""

from __future__ import annotations

import json
import random

from swarm_tui.gateway.wire import encode_body

TEXT = "abc XYZ 019 .,;!?'\"\\/ \t\n\r\b\f\x00\x1f\x7f 한국어 中文 カナ éü 🙂"


def test_a_calls_body_is_the_bytes_the_utf8_encoder_writes_whatever_its_text():
    rng = random.Random(7)
    ascii_bodies = 0
    for _ in range(3000):
        body = {"model": rng.choice(["deepseek-v3.2", "모델"]), "max_tokens": 5,
                "stream": True, "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": "".join(
                    rng.choice(TEXT[:30] if rng.random() < 0.5 else TEXT)
                    for _ in range(rng.randrange(60)))}],
                "user": rng.choice(["a", "a", "ü"])}
        want = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        assert encode_body(body) == want, body
        ascii_bodies += want.isascii()
    assert ascii_bodies > 100  # both ways taken
    assert "한국어".encode() in encode_body({"messages": [{"role": "user", "content": "한국어"}]})
