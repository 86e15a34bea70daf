"""Text from others reaches the terminal shown, never obeyed. A task id is the workload's,
an error message the gateway's, an answer the model's (a prompt can make a model print
anything): an ESC in any of them, printed raw, clears the on-call engineer's screen,
retitles the window or fakes a verdict. On a terminal each control character arrives as
its picture (`␛[2J`); in a file or a pipe the data stays as it was stored.

The gateway here is a real HTTP server in its own process that answers one task with
escape sequences and fails the other with them in its error message."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys

import pytest

from tests.conftest import script_server
from tests.pty_harness import PtyApp

EVIL_ID = "t\x1b[2Jx"
EVIL_ERROR = "upstream said: \x1b]0;PWNED\x07\x1b[2J gone"
EVIL_ANSWER = "fine \x1b[31mred\x1b[0m \x9b2J \u202eevil"
INJECTED = (b"\x1b]0;PWNED", b"t\x1b[2Jx", b"\x1b[31mred", b"\xc2\x9b2J", "\u202e".encode())

GATEWAY = f"""
import sys
from aiohttp import web
async def chat(request):
    body = await request.json()
    if "fail" in body["messages"][-1]["content"]:
        return web.json_response({{"error": {{"message": {EVIL_ERROR!r},
                                              "type": "invalid_request_error"}}}}, status=400)
    return web.json_response({{"id": "c1", "object": "chat.completion", "created": 0,
        "model": body["model"], "choices": [{{"index": 0, "finish_reason": "stop",
        "message": {{"role": "assistant", "content": {EVIL_ANSWER!r}}}}}],
        "usage": {{"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}}}})
app = web.Application()
app.router.add_post("/v1/chat/completions", chat)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("inject")
    gw, port = script_server(GATEWAY)
    try:
        work = tmp / "w.jsonl"
        work.write_text(json.dumps({"id": EVIL_ID, "prompt": "please fail"}) + "\n"
                        + json.dumps({"id": "ok1", "prompt": "answer"}) + "\n")
        conf = tmp / "c.toml"
        conf.write_text(f'default_gateway = "fake"\n[gateways.fake]\n'
                        f'base_url = "http://127.0.0.1:{port}/v1"\nkey_env = ["FAKE_KEY"]\n')
        env = {"SWARM_TUI_DB": str(tmp / "runs.db"), "XDG_CONFIG_HOME": str(tmp / "x"),
               "SWARM_TUI_CONFIG": str(conf), "FAKE_KEY": "sk-inject-0123456789abcdef"}
        r = subprocess.run([sys.executable, "-m", "swarm_tui", "run", str(work), "--headless",
                            "--quiet", "--json", "--no-preflight"], capture_output=True,
                           text=True, timeout=120, env={**os.environ, **env})
        assert r.returncode == 3, r.stderr  # one of two failed: the SLA is breached
        return {**env, "RUN_ID": json.loads(r.stdout)["run_id"]}
    finally:
        gw.terminate()
        gw.wait(timeout=10)


def _on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, bytes]:
    """The real binary with standard output and error on a pseudo-terminal."""
    controller, terminal = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "swarm_tui", *args], stdout=terminal,
                         stderr=terminal, stdin=subprocess.DEVNULL,
                         env={**os.environ, **env})
    os.close(terminal)
    out = bytearray()
    while True:
        ready, _, _ = select.select([controller], [], [], 60)
        if not ready:
            p.kill()
            pytest.fail(f"no output from {args}")
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal's other side closed: the command ended
            break
        if not chunk:
            break
        out += chunk
    os.close(controller)
    return p.wait(timeout=60), bytes(out)


def _assert_shown_not_obeyed(raw: bytes) -> None:
    for seq in INJECTED:
        assert seq not in raw, seq


def test_the_status_block_on_a_terminal_shows_the_escapes(stored_run, tmp_path):
    code, raw = _on_a_terminal(["replay", stored_run["RUN_ID"], "--at", "end",
                                "--screenshot", str(tmp_path / "s.svg")], stored_run)
    assert code == 0, raw
    _assert_shown_not_obeyed(raw)
    text = raw.decode()
    assert "FAIL   t␛[2Jx" in text and "upstream said: ␛]0;PWNED␇␛[2J" in text


def test_an_export_on_a_terminal_is_shown_and_in_a_pipe_is_the_data(stored_run):
    args = ["export", stored_run["RUN_ID"], "--format", "csv"]
    code, raw = _on_a_terminal(args, stored_run)
    assert code == 0, raw
    _assert_shown_not_obeyed(raw)
    assert "␛]0;PWNED␇" in raw.decode()
    piped = subprocess.run([sys.executable, "-m", "swarm_tui", *args], capture_output=True,
                           timeout=60, env={**os.environ, **stored_run})
    assert piped.returncode == 0
    # the stored bytes, unchanged, for whatever reads the file
    assert EVIL_ERROR.encode() in piped.stdout and EVIL_ANSWER.encode() in piped.stdout


def test_the_console_shows_the_escapes_in_the_log_and_the_detail(stored_run):
    app = PtyApp("replay", stored_run["RUN_ID"], env=stored_run)
    try:
        app.wait_for("t␛[2Jx", timeout=60)  # the event log
        app.send("v")  # every task
        app.wait_for("view: every task", timeout=30)
        app.send("\r")  # the first task's detail: the failed one
        app.wait_for("␛]0;PWNED␇␛[2J", timeout=30)
        app.send("\x1b")
        # back on the dashboard before the next key (ESC then an arrow in one read is
        # alt+arrow to the terminal's parser)
        app.wait_for(lambda text: "response:" not in text, timeout=30)
        app.send("\x1b[C")  # the next task: the answered one
        app.send("\r")
        app.wait_for("red␛[0m", timeout=30)
        _assert_shown_not_obeyed(bytes(app.raw))
    finally:
        app.kill()
