"""`swarm-tui serve` in a real headless browser (Chromium over the DevTools protocol).

xterm.js draws the console on a canvas, so the page holds no text to read: the test hooks
the page's WebSocket before textual.js loads and reads what the console sent to the
browser, then keeps a screenshot of what the browser drew under tests/artifacts/.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.timeout(120)
ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser",
                                                "google-chrome")) if p), None)
# every frame the console sends, as text, kept where the test can read it back
HOOK = """
window.__rx = [];
const Native = window.WebSocket;
window.WebSocket = function (...args) {
  const ws = new Native(...args);
  ws.addEventListener("message", (e) => {
    const d = e.data;
    if (typeof d === "string") { window.__rx.push(d); }
    else if (d instanceof ArrayBuffer) { window.__rx.push(new TextDecoder().decode(d)); }
    else if (d && d.text) { d.text().then((t) => window.__rx.push(t)); }
  });
  return ws;
};
window.WebSocket.prototype = Native.prototype;
Object.assign(window.WebSocket, {OPEN: 1, CLOSED: 3, CONNECTING: 0, CLOSING: 2});
"""


def _wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} never answered")


class Page:
    """The few DevTools calls the test needs, over the page's websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    async def call(self, method: str, **params) -> dict:
        n = next(self.ids)
        await self.ws.send_json({"id": n, "method": method, "params": params})
        while True:
            msg = json.loads((await self.ws.receive(timeout=30)).data)
            if msg.get("id") == n:
                assert "error" not in msg, msg
                return msg.get("result", {})

    async def eval(self, expr: str):
        got = await self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        return got["result"].get("value")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install chromium)")
async def test_serve_shows_the_console_in_a_browser(tmp_path):
    db = tmp_path / "runs.db"
    env = {**os.environ, "SWARM_TUI_DB": str(db), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    # a simulated run the served console watches (paced: it outlives the test)
    run = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", "--demo", "20000", "--headless", "--quiet",
         "--concurrency", "20", "--rate", "100", "--sim-profile", "fixed:100"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    port = free_port()
    served = browser = None
    try:
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "the run never started"
            if db.exists():
                try:
                    with sqlite3.connect(db) as c:
                        if c.execute("SELECT COUNT(*) FROM results").fetchone()[0]:
                            break
                except sqlite3.Error:
                    pass
            await asyncio.sleep(0.1)
        served = subprocess.Popen([sys.executable, "-m", "swarm_tui", "serve", "--port",
                                   str(port)], env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        await asyncio.to_thread(_wait_http, f"http://127.0.0.1:{port}/")
        devtools = free_port()
        browser = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
             f"--remote-debugging-port={devtools}", f"--user-data-dir={tmp_path / 'chrome'}",
             "--window-size=1280,800", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.to_thread(_wait_http, f"http://127.0.0.1:{devtools}/json/version")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{devtools}/json/list") as r:
                target = next(t for t in await r.json() if t["type"] == "page")
            async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Page(ws)
                await page.call("Page.enable")
                await page.call("Page.addScriptToEvaluateOnNewDocument", source=HOOK)
                await page.call("Page.navigate", url=f"http://127.0.0.1:{port}/")
                # the page starts the session itself (its button is for a restart)
                deadline = time.monotonic() + 90
                screen = ""
                while time.monotonic() < deadline:
                    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "",
                                    await page.eval("(window.__rx || []).join('')") or "")
                    if "SIMULATED" in screen and "agents:" in screen and "RUNNING" in screen:
                        break
                    await asyncio.sleep(0.5)
                assert "SIMULATED" in screen, screen[-2000:]
                # the agents view: its header and agents at work
                assert "agents:" in screen and "RUNNING" in screen
                assert "◐" in screen or "○" in screen
                # the canvas paints the frames received a moment later: wait for a drawn
                # console (a blank page compresses to a few KB), not for a fixed time
                png = b""
                while time.monotonic() < deadline and len(png) <= 20_000:
                    shot = await page.call("Page.captureScreenshot", format="png")
                    png = base64.b64decode(shot["data"])
                    await asyncio.sleep(0.2)
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "serve-console.png").write_bytes(png)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000  # a drawn console
    finally:
        for proc in (browser, served, run):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
