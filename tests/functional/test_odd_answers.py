"""What a gateway sends that it should not, as a third party may: an answer holding
U+0000 (PostgreSQL's text refuses it), half a surrogate pair (the first UTF-8 encode
raised), usage that is not usage (a negative count was a negative cost). Each is a
stored, billed answer on record — never a refused row, a cancelled task or a spend that
goes down. Every gateway here is a real HTTP server in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from swarm_tui.store.target import PgTarget
from tests.conftest import script_server

GATEWAY = """
import sys
from aiohttp import web
async def chat(request):
    body = await request.json()
    return web.json_response({"id": "c1", "object": "chat.completion", "created": 0,
        "model": body["model"], "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": "nul here:\\u0000 end"}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}})
app = web.Application()
app.router.add_post("/v1/chat/completions", chat)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


@pytest.fixture
def nul_gateway():
    gw, port = script_server(GATEWAY)
    yield port
    gw.terminate()
    gw.wait(timeout=10)


def test_an_answer_with_nul_is_stored_on_either_back_end(any_db, nul_gateway, tmp_path):
    work = tmp_path / "w.jsonl"
    work.write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"task {i}"}) + "\n"
                            for i in range(5)))
    conf = tmp_path / "c.toml"
    conf.write_text(f'default_gateway = "fake"\n[gateways.fake]\n'
                    f'base_url = "http://127.0.0.1:{nul_gateway}/v1"\nkey_env = ["FAKE_KEY"]\n')
    env = {**os.environ, "SWARM_TUI_CONFIG": str(conf), "FAKE_KEY": "sk-nul-0123456789abcdef"}
    r = subprocess.run([sys.executable, "-m", "swarm_tui", "run", str(work), "--headless",
                        "--quiet", "--json", "--no-preflight"], capture_output=True, text=True,
                       timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["succeeded"] == 5
    out = subprocess.run([sys.executable, "-m", "swarm_tui", "export", summary["run_id"]],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    answers = {json.loads(line)["response_text"] for line in out.stdout.splitlines()}
    kept = "nul here:\ufffd end" if isinstance(any_db, PgTarget) else "nul here:\x00 end"
    assert answers == {kept}


SURROGATES = """
import sys
from aiohttp import web
async def chat(request):
    body = await request.json()
    if "fail" in body["messages"][-1]["content"]:
        return web.Response(status=400, content_type="application/json",
                            text='{"error": {"message": "bad \\\\udc00 input"}}')
    if body.get("stream"):  # an emoji's two halves in two chunks, then a lone half
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in ('"a \\\\ud83d"', '"\\\\ude00 b \\\\ud83d"'):
            await resp.write(b'data: {"choices": [{"index": 0, "delta": {"content": '
                             + piece.encode() + b'}}]}\\n\\n')
        await resp.write(b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": '
                         b'"stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 7}}'
                         b'\\n\\ndata: [DONE]\\n\\n')
        return resp
    return web.Response(content_type="application/json", text=(
        '{"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": '
        '"assistant", "content": "half \\\\ud83d"}}], "usage": {"prompt_tokens": 5, '
        '"completion_tokens": 7}}'))
app = web.Application()
app.router.add_post("/v1/chat/completions", chat)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.parametrize("stream", [True, False])
def test_half_a_surrogate_pair_from_the_gateway_is_a_stored_answer(tmp_path, stream):
    """JSON lets a gateway write `\\ud83d` alone, or a pair's halves in two chunks: the
    first encode (token counting) raised, and each paid answer ended as a cancelled task
    with no call on record and a traceback on screen."""
    gw, port = script_server(SURROGATES)
    try:
        work = tmp_path / "w.jsonl"
        work.write_text(json.dumps({"id": "a", "prompt": "answer"}) + "\n"
                        + json.dumps({"id": "b", "prompt": "please fail"}) + "\n")
        conf = tmp_path / "c.toml"
        conf.write_text(f'default_gateway = "fake"\n[gateways.fake]\n'
                        f'base_url = "http://127.0.0.1:{port}/v1"\nkey_env = ["FAKE_KEY"]\n')
        env = {**os.environ, "SWARM_TUI_CONFIG": str(conf), "FAKE_KEY": "sk-sur-0123456789ab"}
        flags = [] if stream else ["--no-stream"]
        r = subprocess.run([sys.executable, "-m", "swarm_tui", "run", str(work), "--headless",
                            "--quiet", "--json", "--no-preflight", *flags], capture_output=True,
                           text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
        assert r.returncode == 3, r.stderr  # one of two failed (400): a breach
        assert "Traceback" not in r.stderr
        summary = json.loads(r.stdout)
        assert (summary["succeeded"], summary["failed"], summary["cancelled"]) == (1, 1, 0)
        out = subprocess.run([sys.executable, "-m", "swarm_tui", "export", summary["run_id"]],
                             capture_output=True, text=True, timeout=60, env=env)
        tasks = {t["task_id"]: t for t in map(json.loads, out.stdout.splitlines())}
        answer = "a \U0001f600 b \ufffd" if stream else "half \ufffd"
        assert tasks["a"]["response_text"] == answer and tasks["a"]["tokens_out"] == 7
        assert tasks["b"]["error_message"] == "bad \ufffd input"
    finally:
        gw.terminate()
        gw.wait(timeout=10)


USAGES = """
import json, sys
from aiohttp import web
USAGE = {"negative": {"prompt_tokens": -500000, "completion_tokens": 7},
         "strings": {"prompt_tokens": "12", "completion_tokens": "7"},
         "floats": {"prompt_tokens": 5.0, "completion_tokens": 7.0},
         "list": [5, 7],
         "cached": {"prompt_tokens": 5, "completion_tokens": 7,
                    "prompt_tokens_details": {"cached_tokens": 99}}}
async def chat(request):
    body = await request.json()
    kind = body["messages"][-1]["content"]
    return web.json_response({"choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": "fine"}}], "usage": USAGE[kind]})
app = web.Application()
app.router.add_post("/v1/chat/completions", chat)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


@pytest.mark.usefixtures("no_user_config")
def test_usage_that_is_not_usage_is_estimated_never_a_negative_cost(tmp_path):
    """A gateway's usage is the bill: a negative count was a negative cost (the budget's
    spend went down), a string count raised after the call. Such usage is treated as
    absent — estimated, marked — and cached tokens never exceed the prompt's."""
    gw, port = script_server(USAGES)
    try:
        kinds = ["negative", "strings", "floats", "list", "cached"]
        work = tmp_path / "w.jsonl"
        work.write_text("".join(json.dumps({"id": k, "prompt": k, "max_tokens": 64}) + "\n"
                                for k in kinds))
        conf = tmp_path / "c.toml"
        conf.write_text(f'default_gateway = "fake"\n[gateways.fake]\n'
                        f'base_url = "http://127.0.0.1:{port}/v1"\nkey_env = ["FAKE_KEY"]\n')
        env = {**os.environ, "SWARM_TUI_CONFIG": str(conf), "FAKE_KEY": "sk-use-0123456789ab"}
        r = subprocess.run([sys.executable, "-m", "swarm_tui", "run", str(work), "--headless",
                            "--quiet", "--json", "--no-preflight", "--no-stream",
                            "--budget", "1"], capture_output=True, text=True, timeout=120,
                           env=env, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        summary = json.loads(r.stdout)
        assert summary["succeeded"] == 5 and summary["cost_usd"] > 0
        out = subprocess.run([sys.executable, "-m", "swarm_tui", "export", summary["run_id"]],
                             capture_output=True, text=True, timeout=60, env=env)
        t = {x["task_id"]: x for x in map(json.loads, out.stdout.splitlines())}
        for k in ("negative", "strings", "list"):
            assert t[k]["usage_estimated"] and t[k]["tokens_in"] > 0, t[k]
            assert t[k]["cost_usd"] > 0
        assert (t["floats"]["tokens_in"], t["floats"]["tokens_out"]) == (5, 7)
        assert not t["floats"]["usage_estimated"]
        assert (t["cached"]["tokens_in"], t["cached"]["cached_in"]) == (5, 5)
    finally:
        gw.terminate()
        gw.wait(timeout=10)
