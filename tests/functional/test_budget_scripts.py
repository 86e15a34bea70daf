"""The budget cap holds in every script: Chinese, Korean and Japanese prompts against a
gateway that bills the most any byte-level BPE can (every UTF-8 byte a token), with its
usage reported and stripped. A ceiling built on chars/4 passed the cap 4x on Chinese."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from swarm_tui.prices import load_price_table
from tests.conftest import TEST_KEY, start_sim_process, swarm

# the team's daily text: Korean, the Chinese it routes to Kimi, and Japanese
TEXTS = {
    "zh": "请总结以下关于网关迁移的文档，列出延迟、成功率和成本的变化，并给出建议。" * 12,
    "ko": ("다음 게이트웨이 마이그레이션 문서를 요약하고 "
           "지연 시간, 성공률, 비용 변화를 정리하세요. ") * 8,
    "ja": "次のゲートウェイ移行文書を要約し、遅延、成功率、コストの変化をまとめてください。" * 12,
}
CAP = 0.02


@pytest.fixture(params=["final", "none"], ids=["usage", "usage-stripped"])
def byte_billing_gateway(request, tmp_path):
    proc, port = start_sim_process("--profile", "fixed:30", "--prompt-counting", "bytes",
                                   "--usage", request.param)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[gateways.local]\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                   'key_env = ["GW_KEY"]\n')
    yield port, cfg, request.param
    proc.terminate()
    proc.wait(10)


@pytest.mark.slow
def test_the_cap_holds_on_cjk_prompts_against_a_byte_billing_gateway(
        tmp_path, byte_billing_gateway, no_user_config):
    _port, cfg, usage = byte_billing_gateway
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"id": f"{lang}{i}", "prompt": text, "model": "kimi-k2.5",
                                     "max_tokens": 200}, ensure_ascii=False) + "\n"
                         for i in range(80) for lang, text in TEXTS.items()))
    r = swarm("run", str(w), "--config", str(cfg), "--budget", str(CAP), "--concurrency", "20",
              "--headless", "--json", "--quiet", env={"GW_KEY": TEST_KEY})
    assert r.returncode == 4, r.stderr  # stopped at the cap, the rest unsent
    summary = json.loads(r.stdout)
    assert 0 < summary["succeeded"] < 240
    # what the gateway billed, recomputed from its own counts at the price table: every
    # prompt byte a token (+4 a message), and the output it reported — or, stripped, the
    # most it may have been (max_tokens)
    price = load_price_table(None, {}, "test")
    with sqlite3.connect(os.environ["SWARM_TUI_DB"]) as c:
        calls = c.execute("SELECT t.task_json, a.tokens_out FROM attempts a JOIN tasks t ON "
                          "t.run_id = a.run_id AND t.seq = a.seq WHERE a.outcome = 'ok'"
                          ).fetchall()
    billed = 0.0
    for raw, tokens_out in calls:
        task = json.loads(raw)
        out = tokens_out if usage == "final" else task["max_tokens"]
        billed += price.cost("kimi-k2.5", len(task["prompt"].encode()) + 4, out) or 0.0
    assert calls and billed <= CAP, (billed, len(calls), usage)
    if usage == "final":  # what the run recorded is what was billed
        assert abs(summary["cost_usd"] - billed) < 1e-9
