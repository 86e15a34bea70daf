"""Token counts in every script, one count for routing and for usage a gateway left out:
a model family's tokenizer read from a local file when the config names one, else an
estimate that knows scripts. chars/4 was 68 % low on Chinese: 99 of 100 long Chinese
prompts stayed on the short-context model."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
from pathlib import Path

import pytest

from swarm_tui.engine.routing import choose_model
from swarm_tui.settings.sections import RoutingConfig
from swarm_tui.token_count import TokenCounts, configure, estimate_tokens, load_tokenizer
from swarm_tui.workload import Task
from tests.conftest import TEST_KEY, assert_one_line_error, start_sim_process, swarm

CORPORA = Path(__file__).resolve().parent.parent.parent / "bench" / "corpora"


def _corpus(name: str) -> list[str]:
    return [json.loads(line) for line in (CORPORA / f"{name}.txt").open(encoding="utf-8")]


@pytest.fixture(autouse=True)
def _estimate_again():
    yield
    configure(TokenCounts())  # a test's tokenizer does not leak into the next test


@pytest.mark.parametrize("name", ["en", "en-docs", "code", "zh", "ko", "ja"])
def test_the_estimate_is_within_15_percent_of_o200k_in_every_script(name):
    """Against the totals tiktoken's o200k_base counted (bench/tokens.py --write-reference):
    chars/4 was −68 % on Chinese and Japanese, −45 % on Korean, +17 % on short English."""
    truth = json.loads((CORPORA / "o200k_counts.json").read_text())["totals"][name]
    estimate = sum(estimate_tokens(p) for p in _corpus(name))
    assert abs(estimate / truth - 1) <= 0.15, (name, estimate, truth)


def test_long_chinese_prompts_route_to_the_long_context_model():
    """1,200 Chinese characters are ~1,000 tokens: chars/4 said 300 and kept them short."""
    routing = RoutingConfig(long_context_tokens=1000)
    text = "".join(_corpus("zh"))
    long_prompts = [text[i:i + 1500] for i in range(0, 24_000, 1500)]   # ~1,300 tokens
    short_prompts = [text[i:i + 600] for i in range(0, 12_000, 600)]    # ~530 tokens
    assert {choose_model(Task(id="l", prompt=p), routing, "d") for p in long_prompts} == {
        routing.long_model}
    assert {choose_model(Task(id="s", prompt=p), routing, "d") for p in short_prompts} == {
        routing.short_model}


def _tiny_bpe(tmp_path: Path) -> Path:
    """A byte-level BPE tokenizer.json trained here on English only: Chinese falls apart
    into bytes (~3 tokens a character) — a family whose count no estimate can know."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus("en") * 3, trainer)
    path = tmp_path / "tiny" / "tokenizer.json"
    path.parent.mkdir()
    tok.save(str(path))
    return path


def _tiny_tiktoken(tmp_path: Path) -> Path:
    """A .tiktoken BPE file: the 256 bytes and a few merges."""
    ranks = [bytes([b]) for b in range(256)] + [b"th", b"the", b" the", b"in", b"ing"]
    path = tmp_path / "tiny.tiktoken"
    path.write_text("".join(f"{base64.b64encode(t).decode()} {i}\n"
                            for i, t in enumerate(ranks)))
    return path


def test_a_tokenizer_json_and_a_tiktoken_file_count_as_their_libraries_do(tmp_path):
    from tokenizers import Tokenizer

    path = _tiny_bpe(tmp_path)
    count = load_tokenizer(str(path), "config")
    ref = Tokenizer.from_file(str(path))
    for text in _corpus("zh")[:20] + _corpus("ko")[:20] + _corpus("code")[:5]:
        assert count(text) == len(ref.encode(text, add_special_tokens=False).ids)
    bpe = _tiny_tiktoken(tmp_path)
    count = load_tokenizer(str(bpe), "config")
    # o200k's split (the file's name names no other): "the" | " thing", then the file's
    # merges: the | ␠ th ing; Hangul has no merge here: a token a byte
    assert count("the thing") == 4 and count("안녕") == len("안녕".encode())
    # tokens a tokenizer calls special are counted as text, never refused
    assert count("<|endoftext|>") > 1


def test_a_tokenizer_is_chosen_by_model_glob_and_else_the_estimate(tmp_path):
    counts = TokenCounts.load({"kimi-*": str(_tiny_bpe(tmp_path))}, "config", None, "kimi-k2.5")
    zh = _corpus("zh")[0]
    assert counts.exact("kimi-k2.5") and not counts.exact("deepseek-v3.2")
    assert counts.for_model("deepseek-v3.2") is estimate_tokens
    assert counts.for_model(None)(zh) == counts.for_model("kimi-k2.5")(zh) > 2 * len(zh)


@pytest.mark.parametrize(("spec", "needle"), [
    ("missing/tokenizer.json", "no such tokenizer file"),
    ("tiktoken:o200k_base", "never downloads"),
    ("tiktoken:no_such_encoding", "tiktoken:no_such_encoding"),
    ("bad.json", "not a tokenizer.json"),
    ("bad.tiktoken", "not a .tiktoken BPE file"),
])
def test_a_tokenizer_that_cannot_be_read_is_one_line_and_exit_2(tmp_path, no_user_config,
                                                                spec, needle):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "bad.tiktoken").write_text("!!! not base64 x\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[tokenizers]\n"kimi-*" = "{spec}"\n')
    empty_cache = tmp_path / "tiktoken-cache"
    empty_cache.mkdir()
    r = swarm("run", "--demo", "3", "--config", str(cfg), "--headless",
              env={"TIKTOKEN_CACHE_DIR": str(empty_cache)})
    assert_one_line_error(r, 2, str(cfg), "tokenizers.kimi-*", needle)


@pytest.mark.slow
def test_routing_and_unreported_usage_follow_the_configured_tokenizer(tmp_path,
                                                                      no_user_config):
    """Through the real binary, against a gateway that reports no usage: the tokens booked
    are the configured tokenizer's count plus the chat template's (4 a message, 3 for the
    reply), and a prompt long by that tokenizer goes to the long-context model though the
    estimate would keep it short."""
    tok = _tiny_bpe(tmp_path)
    count = load_tokenizer(str(tok), "test")
    proc, port = start_sim_process("--profile", "fixed:20", "--usage", "none")
    try:
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[gateways.local]\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                       'key_env = ["GW_KEY"]\n'
                       f'[tokenizers]\n"kimi-*" = "{tok}"\n"deepseek-*" = "{tok}"\n')
        zh = "".join(_corpus("zh"))[:500]   # ~440 tokens by the estimate, ~1,500 here
        en = " ".join(_corpus("en"))[:400]
        assert estimate_tokens(zh) < 1000 < count(zh)
        w = tmp_path / "w.jsonl"
        w.write_text("".join(json.dumps({"id": i, "prompt": p, "max_tokens": 20},
                                        ensure_ascii=False) + "\n"
                             for i, p in (("zh", zh), ("en", en))))
        r = swarm("run", str(w), "--config", str(cfg), "--headless", "--quiet",
                  env={"GW_KEY": TEST_KEY})
        assert r.returncode in (0, 3), r.stderr
    finally:
        proc.terminate()
        proc.wait(10)
    with sqlite3.connect(os.environ["SWARM_TUI_DB"]) as c:
        rows = dict((tid, (model, tokens_in)) for tid, model, tokens_in in c.execute(
            "SELECT json_extract(t.task_json, '$.id'), a.model, a.tokens_in FROM attempts a "
            "JOIN tasks t ON t.run_id = a.run_id AND t.seq = a.seq WHERE a.outcome = 'ok'"))
    assert rows["zh"] == ("kimi-k2.5", count(zh) + 4 + 3)
    assert rows["en"] == ("deepseek-v3.2", count(en) + 4 + 3)
