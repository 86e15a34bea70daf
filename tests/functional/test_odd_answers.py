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
from pathlib import Path

import pytest

from swarm_tui.store.target import PgTarget
from tests.conftest import script_server


def gateway(handler: str) -> str:
    """A scripted gateway: `handler` defines `async def chat(request)`."""
    return ("import json, sys\nfrom aiohttp import web\n" + handler
            + 'app = web.Application()\napp.router.add_post("/v1/chat/completions", chat)\n'
            'web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)\n')


def run_against(script: str, tmp_path: Path, tasks: list[dict], *flags: str,
                gateway_toml: str = "") -> tuple[subprocess.CompletedProcess[str], dict]:
    """The real binary running `tasks` against `script`'s gateway (its own process):
    the finished `run --json` and the environment that reaches its database."""
    gw, port = script_server(script)
    try:
        work = tmp_path / "w.jsonl"
        work.write_text("".join(json.dumps(t) + "\n" for t in tasks))
        conf = tmp_path / "c.toml"
        conf.write_text(f'default_gateway = "fake"\n[gateways.fake]\n'
                        f'base_url = "http://127.0.0.1:{port}/v1"\nkey_env = ["FAKE_KEY"]\n'
                        + gateway_toml)
        env = {**os.environ, "SWARM_TUI_CONFIG": str(conf), "FAKE_KEY": "sk-odd-0123456789ab"}
        r = subprocess.run([sys.executable, "-m", "swarm_tui", "run", str(work), "--headless",
                            "--quiet", "--json", "--no-preflight", *flags], capture_output=True,
                           text=True, timeout=100, env=env, stdin=subprocess.DEVNULL)
        return r, env
    finally:
        gw.terminate()
        gw.wait(timeout=10)


def exported(run_id: str, env: dict) -> dict[str, dict]:
    """The stored run's tasks by id (`export`, as a user reads it back)."""
    out = subprocess.run([sys.executable, "-m", "swarm_tui", "export", run_id],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return {t["task_id"]: t for t in map(json.loads, out.stdout.splitlines())}


GATEWAY = gateway("""
async def chat(request):
    body = await request.json()
    return web.json_response({"id": "c1", "object": "chat.completion", "created": 0,
        "model": body["model"], "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": "nul here:\\u0000 end"}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}})
""")



def test_an_answer_with_nul_is_stored_on_either_back_end(any_db, tmp_path):
    r, env = run_against(GATEWAY, tmp_path, [{"id": f"t{i}", "prompt": f"task {i}"}
                                             for i in range(5)])
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["succeeded"] == 5
    answers = {t["response_text"] for t in exported(summary["run_id"], env).values()}
    kept = "nul here:\ufffd end" if isinstance(any_db, PgTarget) else "nul here:\x00 end"
    assert answers == {kept}

SURROGATES = gateway("""
import sys
from pathlib import Path
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
""")


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.parametrize("stream", [True, False])
def test_half_a_surrogate_pair_from_the_gateway_is_a_stored_answer(tmp_path, stream):
    """JSON lets a gateway write `\\ud83d` alone, or a pair's halves in two chunks: the
    first encode (token counting) raised, and each paid answer ended as a cancelled task
    with no call on record and a traceback on screen."""
    r, env = run_against(SURROGATES, tmp_path, [{"id": "a", "prompt": "answer"},
                                                {"id": "b", "prompt": "please fail"}],
                         *([] if stream else ["--no-stream"]))
    assert r.returncode == 3, r.stderr  # one of two failed (400): a breach
    assert "Traceback" not in r.stderr
    summary = json.loads(r.stdout)
    assert (summary["succeeded"], summary["failed"], summary["cancelled"]) == (1, 1, 0)
    tasks = exported(summary["run_id"], env)
    answer = "a \U0001f600 b \ufffd" if stream else "half \ufffd"
    assert tasks["a"]["response_text"] == answer and tasks["a"]["tokens_out"] == 7
    assert tasks["b"]["error_message"] == "bad \ufffd input"

USAGES = gateway("""
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
""")


@pytest.mark.usefixtures("no_user_config")
def test_usage_that_is_not_usage_is_estimated_never_a_negative_cost(tmp_path):
    """A gateway's usage is the bill: a negative count was a negative cost (the budget's
    spend went down), a string count raised after the call. Such usage is treated as
    absent — estimated, marked — and cached tokens never exceed the prompt's."""
    kinds = ["negative", "strings", "floats", "list", "cached"]
    r, env = run_against(USAGES, tmp_path, [{"id": k, "prompt": k, "max_tokens": 64}
                                            for k in kinds], "--no-stream", "--budget", "1")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["succeeded"] == 5 and summary["cost_usd"] > 0
    t = exported(summary["run_id"], env)
    for k in ("negative", "strings", "list"):
        assert t[k]["usage_estimated"] and t[k]["tokens_in"] > 0, t[k]
        assert t[k]["cost_usd"] > 0
    assert (t["floats"]["tokens_in"], t["floats"]["tokens_out"]) == (5, 7)
    assert not t["floats"]["usage_estimated"]
    assert (t["cached"]["tokens_in"], t["cached"]["cached_in"]) == (5, 5)

ENDLESS = gateway("""
import sys
from pathlib import Path
from aiohttp import web
async def chat(request):
    body = await request.json()
    if body.get("stream"):  # a proxy looping: one chunk after another, no end, no newline
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"index": 0, "delta": {"content": "')
        while True:
            await resp.write(b"x" * 65536)
    return web.Response(content_type="application/json",  # 20 MB in one answer
                        body=b'{"choices": [{"index": 0, "finish_reason": "stop", "message": '
                             b'{"role": "assistant", "content": "' + b"x" * (20 << 20)
                             + b'"}}]}')
""")


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.parametrize("transport", ["wire", "aiohttp", "httpx2"])
@pytest.mark.parametrize("stream", [True, False])
def test_an_answer_without_end_is_cut_at_its_bound_not_read_into_memory(tmp_path, stream,
                                                                       transport):
    """A gateway or proxy that never ends its answer grew the swarm process until the
    call's timeout (gigabytes on loopback). Past 16 MiB the call fails (class other, not
    retried: it was answered), with one line on record saying why — on the wire path and
    through the SDK on either of its transports."""
    r, env = run_against(ENDLESS, tmp_path, [{"id": "a", "prompt": "answer"}],
                         "--transport", transport, *([] if stream else ["--no-stream"]),
                         gateway_toml="timeout_s = 120\n")
    assert r.returncode == 3, r.stderr
    task = exported(json.loads(r.stdout)["run_id"], env)["a"]
    assert task["state"] == "failed" and task["error_class"] == "other"
    assert "past 16 MiB: not read on" in task["error_message"]
    assert len(task["attempts"]) == 1


STRING_ERROR = gateway("""
async def chat(request):
    return web.json_response({"error": "quota exceeded for this key, slow down"})
""")


@pytest.mark.usefixtures("no_user_config")
def test_an_error_given_as_a_string_is_its_message(tmp_path):
    """`{"error": "…"}` in a 200 answer: the string is what the on-call engineer needs
    to read (it was stored as `in-stream error: error`)."""
    r, env = run_against(STRING_ERROR, tmp_path, [{"id": "a", "prompt": "x"}], "--no-stream")
    assert r.returncode == 3, r.stderr
    task = exported(json.loads(r.stdout)["run_id"], env)["a"]
    assert task["error_message"] == "in-stream error: quota exceeded for this key, slow down"


NO_CHOICES = gateway("""
async def chat(request):
    return web.json_response({"id": "c1", "object": "chat.completion", "choices": [],
                              "usage": {"prompt_tokens": 5, "completion_tokens": 0}})
""")


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.parametrize("transport", ["wire", "aiohttp"])
def test_an_answer_with_no_choices_says_so(tmp_path, transport):
    """A whole (not streamed) answer whose `choices` is empty was stored as "stream ended
    before a finish_reason", class connection: a cut link, where the gateway answered in
    full with nothing in it. It is an unreadable answer (protocol), said as such."""
    r, env = run_against(NO_CHOICES, tmp_path, [{"id": "a", "prompt": "x"}], "--no-stream",
                         "--transport", transport, gateway_toml="[retry]\nmax_attempts = 1\n")
    assert r.returncode == 3, r.stderr
    task = exported(json.loads(r.stdout)["run_id"], env)["a"]
    assert task["state"] == "failed" and task["error_class"] == "protocol", task
    assert "no choices" in task["error_message"], task["error_message"]
    assert [a["error_class"] for a in task["attempts"]] == ["protocol"] * len(task["attempts"])


CHUNKED_CONTENT = gateway("""
THINK = {"type": "thinking", "thinking": [{"type": "text", "text": "let me see"}]}
async def chat(request):
    body = await request.json()
    if body["messages"][-1]["content"] == "odd":  # a number where the text goes
        return web.json_response({"choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": 42}}]})
    if body.get("stream"):  # Mistral's reasoning models: typed chunks in every delta
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for content in ([THINK], [{"type": "text", "text": "안녕 "}],
                        [{"type": "text", "text": "world"}]):
            await resp.write(b"data: " + json.dumps({"choices": [{"index": 0, "delta": {
                "content": content}}]}).encode() + b"\\n\\n")
        await resp.write(b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": '
                         b'"stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 7}}'
                         b'\\n\\ndata: [DONE]\\n\\n')
        return resp
    return web.json_response({"choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": [THINK,
            {"type": "text", "text": "안녕 "}, {"type": "text", "text": "world"}]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7}})
""")


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.parametrize("transport", ["wire", "aiohttp"])
@pytest.mark.parametrize("stream", [True, False])
def test_an_answer_in_typed_chunks_is_its_text_chunks(tmp_path, stream, transport):
    """A reasoning model's content as a list of typed chunks (Mistral's Magistral) was
    booked failed — a paid answer sent again. Its text chunks are the answer, on the wire
    path and on the SDK's; a content that is neither text nor chunks is a protocol error
    named on record."""
    r, env = run_against(CHUNKED_CONTENT, tmp_path, [{"id": "a", "prompt": "answer"},
                                                     {"id": "b", "prompt": "odd"}],
                         "--transport", transport, *([] if stream else ["--no-stream"]))
    assert r.returncode == 3, r.stderr  # b failed: a breach
    assert "Traceback" not in r.stderr
    tasks = exported(json.loads(r.stdout)["run_id"], env)
    a, b = tasks["a"], tasks["b"]
    assert a["state"] == "succeeded" and a["response_text"] == "안녕 world"
    assert (a["tokens_in"], a["tokens_out"], len(a["attempts"])) == (5, 7, 1)
    assert b["state"] == "failed" and b["error_message"].endswith("content is int, not text")
    # an unreadable answer is retried as the protocol class is (docs/retries.md), each
    # send on record with why
    assert {(x["error_class"], x["error_message"]) for x in b["attempts"]} == {
        ("protocol", "unreadable answer: ProtocolError: content is int, not text")}


NO_FINISH = gateway("""
async def chat(request):
    body = await request.json()
    kind = body["messages"][-1]["content"]
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    reason = "" if kind == "blank" else None  # a finish_reason of "" on every chunk
    for word in ("whole ", "answer"):
        await resp.write(b"data: " + json.dumps({"choices": [{"index": 0, "delta": {
            "content": word}, "finish_reason": reason}]}).encode() + b"\\n\\n")
    await resp.write(b'data: {"choices": [], "usage": {"prompt_tokens": 5, '
                     b'"completion_tokens": 7}}\\n\\n')
    if kind == "done":
        await resp.write(b"data: [DONE]\\n\\n")
    elif kind == "done-at-eof":  # the sentinel is the body's last bytes: no newline
        await resp.write(b"data: [DONE]")
    return resp  # "blank": the body just ends
""")


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.parametrize("transport", ["wire", "aiohttp", "httpx2"])
def test_a_stream_the_gateway_ended_with_done_is_whole_without_a_finish_reason(tmp_path,
                                                                              transport):
    """Gemini's OpenAI-compatible proxies and some local servers end a stream with
    `[DONE]` and no finish_reason (or "" on every chunk): the answer is whole, and it was
    booked cut and sent again. A body that ends with neither is still a cut stream. The
    same on the SDK's path (its stream swallows `[DONE]`; the body's reader sees it)."""
    r, env = run_against(NO_FINISH, tmp_path, [{"id": k, "prompt": k} for k in
                                               ("done", "done-at-eof", "blank")],
                         "--transport", transport)
    assert r.returncode == 3, r.stderr  # "blank" failed
    tasks = exported(json.loads(r.stdout)["run_id"], env)
    for k in ("done", "done-at-eof"):
        t = tasks[k]
        assert t["state"] == "succeeded" and t["response_text"] == "whole answer", t
        assert (len(t["attempts"]), t["tokens_out"]) == (1, 7)
    blank = tasks["blank"]
    assert blank["state"] == "failed" and len(blank["attempts"]) > 1
    assert {a["error_message"] for a in blank["attempts"]} == {
        "stream ended before a finish_reason"}
