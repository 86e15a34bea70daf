"""`swarm-tui serve` in a real headless browser (Chromium over the DevTools protocol).

xterm.js draws the console on a canvas, so the page holds no text to read: the test hooks
the page's WebSocket before textual.js loads and reads what the console sent to the
browser, then keeps a screenshot of what the browser drew under tests/artifacts/.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.timeout(120)
TOKEN = "t0ken-for-the-tests-" + "x" * 20  # the login (a token file of the operator's)
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
    """Until the server answers at all (the console's 401 without a login counts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except urllib.error.HTTPError as e:
            if e.code == 401:
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


@contextlib.asynccontextmanager
async def chromium_page(tmp_path: Path) -> AsyncIterator[Page]:
    """A headless Chromium with one page, its WebSocket hooked (HOOK) on every document."""
    assert CHROMIUM is not None
    devtools = free_port()
    browser = subprocess.Popen(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
         f"--remote-debugging-port={devtools}", f"--user-data-dir={tmp_path / 'chrome'}",
         "--window-size=1280,800", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await asyncio.to_thread(_wait_http, f"http://127.0.0.1:{devtools}/json/version")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{devtools}/json/list") as r:
                target = next(t for t in await r.json() if t["type"] == "page")
            async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Page(ws)
                await page.call("Page.enable")
                await page.call("Page.addScriptToEvaluateOnNewDocument", source=HOOK)
                yield page
    finally:
        browser.terminate()
        try:
            browser.wait(10)
        except subprocess.TimeoutExpired:
            browser.kill()


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
    served = None
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
        token = tmp_path / "token"
        token.write_text(TOKEN)
        token.chmod(0o600)
        served = subprocess.Popen([sys.executable, "-m", "swarm_tui", "serve", "--port",
                                   str(port), "--token-file", str(token)], env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
        await asyncio.to_thread(_wait_http, f"http://127.0.0.1:{port}/")
        async with chromium_page(tmp_path) as page:
            # logs in as the engineer does: the URL with the token, once
            await page.call("Page.navigate", url=f"http://127.0.0.1:{port}/?token={TOKEN}")
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
            # a key press from the browser reaches the console: `?` opens its help
            # (a click first: the terminal takes keys once focused, as for a person)
            for kind in ("mousePressed", "mouseReleased"):
                await page.call("Input.dispatchMouseEvent", type=kind, x=640, y=400,
                                button="left", clickCount=1)
            for kind in ("keyDown", "keyUp"):
                await page.call("Input.dispatchKeyEvent", type=kind, key="?", text="?")
            while time.monotonic() < deadline and "swarm-tui keys" not in screen:
                screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "",
                                await page.eval("(window.__rx || []).join('')") or "")
                await asyncio.sleep(0.3)
            assert "swarm-tui keys" in screen, screen[-1500:]
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
        for proc in (served, run):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


# -- the door: login, Origin, TLS, a private socket -------------------------------------------


@pytest.fixture
def served_db(tmp_path, monkeypatch):
    env = {**os.environ, "SWARM_TUI_DB": str(tmp_path / "runs.db"),
           "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    r = subprocess.run([sys.executable, "-m", "swarm_tui", "run", "--demo", "5", "--headless",
                        "--quiet"], env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    assert r.returncode in (0, 3), r.stderr
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return env, token


def _serve(env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "swarm_tui", "serve", "last", *args],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


async def _until_listening(url: str, connector=None) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            async with aiohttp.ClientSession(connector=connector, connector_owner=False) as s, \
                    s.get(url):
                return
        except aiohttp.ClientConnectionError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"{url} never answered")


@pytest.mark.slow
async def test_serve_answers_nothing_without_the_login_and_no_other_origin(served_db):
    env, token = served_db
    port = free_port()
    proc = _serve(env, "--port", str(port), "--token-file", str(token), "--write")
    base = f"http://127.0.0.1:{port}"
    try:
        await _until_listening(base + "/")
        # unsafe: keep cookies of an IP address (a browser does)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            for path in ("/", "/static/js/textual.js", "/download/x"):
                async with http.get(base + path) as r:
                    assert r.status == 401, (path, r.status)
            for ws_path in ("/ws", "/ws/at/x/end"):
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await http.ws_connect(base + ws_path)
                assert refused.value.status == 403
            # a link followed from another site: a page holding only a reload of itself;
            # the reload (same origin) without the cookie is refused — no loop, no data
            nav = {"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
            async with http.get(base + "/at/x/end",
                                headers={**nav, "Sec-Fetch-Site": "cross-site"}) as r:
                page = await r.text()
                assert r.status == 200 and 'http-equiv="refresh"' in page
                assert "ws" not in page and "static" not in page, page
            async with http.get(base + "/at/x/end",
                                headers={**nav, "Sec-Fetch-Site": "same-origin"}) as r:
                assert r.status == 401
            async with http.get(base + "/?token=wrong-" + TOKEN) as r:
                assert r.status == 401
            async with http.get(base + "/?token=" + TOKEN + "&fontsize=14",
                                allow_redirects=False) as r:
                assert r.status == 302 and "token" not in r.headers["Location"]
                cookie = r.headers["Set-Cookie"]
                assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
                assert TOKEN not in cookie  # the cookie is a session, not the token
            async with http.get(base + "/") as r:  # the session's cookie is kept
                assert r.status == 200 and "swarm-tui" in await r.text()
                # never inside another site's frame, never kept by a cache
                assert r.headers["Content-Security-Policy"] == "frame-ancestors 'none'"
                assert r.headers["X-Frame-Options"] == "DENY"
                assert r.headers["Cache-Control"] == "no-store"
            # a page elsewhere in the engineer's browser: the cookie goes along, the
            # Origin says where the page came from
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(base + "/ws", headers={"Origin": "http://evil.example"})
            assert refused.value.status == 403
            ws = await http.ws_connect(base + "/ws", headers={"Origin": base})
            await ws.close()
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(base + "/ws/at/x/end",
                                      headers={"Origin": "http://evil.example"})
            assert refused.value.status == 403
            # what a moment's path may hold: a run id and a TIME, never an option
            for bad in ("/at/--write/end", "/at/x/--db=%2Ftmp%2Fz", "/at/x/%20end",
                        "/at/x/end%3Brm"):
                async with http.get(base + bad) as r:
                    assert r.status == 404, bad
            async with http.get(base + "/at/x/end") as r:
                page = await r.text()
                assert r.status == 200 and "/ws/at/x/end" in page
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=10)
    assert "failed login from 127.0.0.1" in err and "evil.example" in err, err
    assert TOKEN not in err  # a token from a file is never printed


@pytest.mark.slow
def test_serve_refuses_what_would_open_the_door(served_db, tmp_path):
    from tests.conftest import assert_one_line_error

    env, token = served_db
    run = [sys.executable, "-m", "swarm_tui", "serve"]

    def refused(*args: str):
        return subprocess.run([*run, *args], env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=30)

    assert_one_line_error(refused("last", "--host", "0.0.0.0", "--write"), 2, "needs TLS")
    token.chmod(0o644)
    assert_one_line_error(refused("last", "--token-file", str(token)), 2, "readable by others")
    assert_one_line_error(refused("last", "--certfile", str(token)), 2, "go together")
    # a TLS key every local user may read: anyone could pose as the console
    import trustme

    issued = trustme.CA().issue_cert("127.0.0.1")
    cert, key = tmp_path / "c.pem", tmp_path / "c.key"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    token.chmod(0o600)
    key.chmod(0o644)
    assert_one_line_error(refused("last", "--token-file", str(token), "--certfile", str(cert),
                                  "--keyfile", str(key)), 2,
                          f"key file {key}: readable by every user of this host (mode 644)")


@pytest.mark.slow
async def test_serve_on_a_socket_only_its_owner_may_open(served_db, tmp_path):
    env, token = served_db
    sock = tmp_path / "console.sock"
    proc = _serve(env, "--socket", str(sock), "--token-file", str(token))
    try:
        conn = aiohttp.UnixConnector(path=str(sock))
        try:
            await _until_listening("http://localhost/", conn)
            assert sock.is_socket() and (sock.stat().st_mode & 0o777) == 0o600
            async with aiohttp.ClientSession(connector=conn, connector_owner=False) as http, \
                    http.get("http://localhost/") as r:
                assert r.status == 401
        finally:
            await conn.close()
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
async def test_serve_off_loopback_over_tls_keeps_its_session_to_https(served_db, tmp_path):
    """`--host 0.0.0.0` with a certificate (a company CA's; here trustme's): the console
    answers over TLS only, the login's cookie is Secure (a browser never sends it over
    plain http), and the console's socket opens for this origin alone."""
    import ssl

    import trustme

    env, token = served_db
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = tmp_path / "console.pem", tmp_path / "console.key"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    key.chmod(0o600)
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    port = free_port()
    proc = _serve(env, "--host", "0.0.0.0", "--port", str(port), "--certfile", str(cert),
                  "--keyfile", str(key), "--token-file", str(token))
    base = f"https://127.0.0.1:{port}"
    try:
        tls = aiohttp.TCPConnector(ssl=trusted)
        try:
            await _until_listening(base + "/", tls)
            async with aiohttp.ClientSession(
                    connector=tls, connector_owner=False,
                    cookie_jar=aiohttp.CookieJar(unsafe=True)) as https:
                async with https.get(base + "/") as r:
                    assert r.status == 401
                async with https.get(base + "/?token=" + TOKEN, allow_redirects=False) as r:
                    assert r.status == 302
                    cookie = r.headers["Set-Cookie"]
                    assert "Secure" in cookie and "HttpOnly" in cookie, cookie
                async with https.get(base + "/") as r:
                    assert r.status == 200 and "swarm-tui" in await r.text()
                ws = await https.ws_connect(f"wss://127.0.0.1:{port}/ws",
                                            headers={"Origin": base})
                await ws.close()
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await https.ws_connect(f"wss://127.0.0.1:{port}/ws",
                                           headers={"Origin": f"http://127.0.0.1:{port}"})
                assert refused.value.status == 403
        finally:
            await tls.close()
        # the same port in plain http: no console (the TLS handshake is all it speaks)
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientError):
                async with http.get(f"http://127.0.0.1:{port}/?token=" + TOKEN) as r:
                    assert r.status != 200
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=10)
    assert TOKEN not in err


# -- from a page to the moment (issue 35) ------------------------------------------------------


def _run_started(db: Path) -> tuple[str, float]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT id, started_at FROM runs ORDER BY started_at DESC").fetchone()


async def _screen(page: Page) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "",
                  await page.eval("(window.__rx || []).join('')") or "")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install chromium)")
async def test_an_alerts_link_opens_its_moment_in_the_served_console(served_db, tmp_path):
    """The link a page carries (`alerts.console_url` + /at/RUN/TIME), followed from another
    site in a browser already logged in: the console opens replaying that run at that
    moment. The browser withholds the SameSite=Strict cookie from a navigation another
    site started; the page asks again from the console's own origin."""
    from aiohttp import web

    from swarm_tui.ops.alerts import Alert
    from swarm_tui.settings.run_sections import AlertKind

    env, token = served_db
    run_id, started = _run_started(Path(env["SWARM_TUI_DB"]))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    link = Alert(AlertKind.RUN_FINISHED, "done", run_id, at=started).link(base)
    assert link is not None and link.startswith(f"{base}/at/{run_id}/")
    # a page on another site (localhost is not 127.0.0.1 to a browser) linking to it
    async def the_page(_request: web.Request) -> web.Response:
        return web.Response(text=f'<a id="go" href="{link}">the page</a>',
                            content_type="text/html")

    elsewhere = web.Application()
    elsewhere.router.add_get("/", the_page)
    runner = web.AppRunner(elsewhere)
    await runner.setup()
    other = free_port()
    await web.TCPSite(runner, "127.0.0.1", other).start()
    served = _serve(env, "--port", str(port), "--token-file", str(token))
    try:
        await asyncio.to_thread(_wait_http, base + "/")
        async with chromium_page(tmp_path) as page:
            await page.call("Page.navigate", url=f"{base}/?token={TOKEN}")  # logged in
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and "agents:" not in await _screen(page):
                await asyncio.sleep(0.3)
            assert "agents:" in await _screen(page)
            assert "├" not in await _screen(page)  # the watched run: no time bar
            await page.call("Page.navigate", url=f"http://localhost:{other}/")
            while time.monotonic() < deadline and not await page.eval(
                    "!!document.getElementById('go')"):
                await asyncio.sleep(0.1)
            await page.eval("document.getElementById('go').click()")
            screen = ""
            while time.monotonic() < deadline:
                screen = await _screen(page)
                if "+0.0s/" in screen and "┤" in screen:
                    break
                await asyncio.sleep(0.3)
            # the replay at the run's start: its time bar at +0.0s, under the link's path
            assert "+0.0s/" in screen and "┤" in screen, screen[-1500:]
            assert await page.eval("location.pathname") == link[len(base):]
    finally:
        await runner.cleanup()
        served.terminate()
        try:
            served.wait(10)
        except subprocess.TimeoutExpired:
            served.kill()
