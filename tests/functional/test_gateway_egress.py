"""How a run reaches its gateway from a bastion, on every transport: over https, its
certificate checked the way OpenSSL checks it; through the proxy the environment names.

The real binary against the simulator behind a TLS front (its own process) whose
certificate a test CA (trustme) issued: untrusted, it is one line and exit 2 at the
preflight, before any call; trusted through SSL_CERT_FILE, the run goes through. And a
forward proxy in its own process that logs what it relays: HTTP_PROXY / HTTPS_PROXY are
followed (the wire path ignored them: aiohttp reads no environment by default), NO_PROXY
too, and an alert's webhook goes the same way. And a gateway that redirects: not followed
(followed, the key was dropped on the way and the key reported rejected)."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from pathlib import Path

import pytest
import trustme

from tests.conftest import (
    assert_one_line_error,
    free_port,
    script_server,
    start_sim_process,
    swarm,
)

TRANSPORTS = ["wire", "aiohttp", "httpx2"]

# TLS in front of a plain HTTP server, bytes relayed both ways (argv[1]: its port)
FRONT = """
import asyncio, ssl, sys
ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain({cert!r})
async def pipe(r, w):
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
    except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
        pass
    finally:
        w.close()
async def link(r, w):
    up_r, up_w = await asyncio.open_connection("127.0.0.1", {target})
    await asyncio.gather(pipe(r, up_w), pipe(up_r, w))
async def main():
    server = await asyncio.start_server(link, "127.0.0.1", int(sys.argv[1]), ssl=ctx)
    await server.serve_forever()
asyncio.run(main())
"""


# a forward proxy (argv[1]: its port) that appends each request line or CONNECT to a log;
# with `creds` ("user:password") it answers 407 to a request without them, as a company's
# proxy does
PROXY = """
import asyncio, base64, sys
from urllib.parse import urlsplit
CREDS = {creds!r}
CHALLENGES = {challenges!r}
async def pipe(r, w):
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
    except OSError:
        pass
    finally:
        w.close()
async def handle(r, w):
    first = await r.readline()
    if not first:
        return w.close()
    method, target, version = first.decode().split()
    head = []
    while (h := await r.readline()) not in (b"\\r\\n", b""):
        head.append(h)
    with open({log!r}, "a") as f:
        f.write(f"{{method}} {{target}}\\n")
    if CREDS is not None:
        wanted = b"basic " + base64.b64encode(CREDS.encode())
        given = [h.split(b":", 1)[1].strip() for h in head
                 if h.lower().startswith(b"proxy-authorization:")]
        if not given or given[0][:6].lower() + given[0][6:] != wanted:
            w.write(b"HTTP/1.1 407 Proxy Authentication Required\\r\\n"
                    + b"".join(b"Proxy-Authenticate: " + c.encode() + b"\\r\\n"
                               for c in CHALLENGES)
                    + b"Content-Length: 0\\r\\nConnection: close\\r\\n\\r\\n")
            await w.drain()
            return w.close()
    if method == "CONNECT":
        host, port = target.rsplit(":", 1)
        up_r, up_w = await asyncio.open_connection(host, int(port))
        w.write(b"HTTP/1.1 200 Connection established\\r\\n\\r\\n")
    else:
        u = urlsplit(target)
        up_r, up_w = await asyncio.open_connection(u.hostname, u.port or 80)
        up_w.write(f"{{method}} {{u.path}} {{version}}\\r\\n".encode() + b"".join(head)
                   + b"\\r\\n")
    await asyncio.gather(pipe(r, up_w), pipe(up_r, w))
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    await server.serve_forever()
asyncio.run(main())
"""


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """The simulator (plain, its port for /sim/stats) behind two TLS fronts: one with a
    certificate for this host, one for another host; and the CA's bundle."""
    tmp = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    bundle = tmp / "corp-ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    sim, sim_port = start_sim_process("--profile", "fixed:20")
    fronts, ports = [], {}
    try:
        for name, hosts in (("here", ("localhost", "127.0.0.1")), ("other", ("gw.example",))):
            cert = tmp / f"{name}.pem"
            issued = ca.issue_cert(*hosts)
            issued.private_key_and_cert_chain_pem.write_to_path(str(cert))
            proc, ports[name] = script_server(FRONT.format(cert=str(cert), target=sim_port))
            fronts.append(proc)
        yield {"bundle": bundle, "sim_port": sim_port, **ports}
    finally:
        for proc in (*fronts, sim):
            proc.terminate()
            proc.wait(10)


def _config(tmp_path: Path, port: int) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[gateways.corp]\nbase_url = "https://localhost:{port}/v1"\n'
                   'key_env = ["CORP_KEY"]\n')
    return cfg


def _run(tmp_path: Path, cfg: Path, transport: str, **env: str):
    if "NO_PROXY" in env:  # both spellings: the lower-case one wins where both are set
        env["no_proxy"] = env["NO_PROXY"]
    return swarm("--config", str(cfg), "run", "--demo", "5", "--headless", "--quiet",
                 "--json", "--transport", transport, timeout=120,
                 env={"CORP_KEY": "sk-corp-0123456789abcdefghijklmn",
                      "SWARM_TUI_DB": str(tmp_path / "runs.db"), **env})


def _requests(sim_port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{sim_port}/sim/stats", timeout=10) as r:
        return int(json.load(r).get("requests", 0))


@pytest.fixture
def no_trust_settings(monkeypatch, no_user_config):
    """This host's own trusted certificates only (the CI's environment may name others)."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_untrusted_certificate_stops_the_run_before_any_call(tls, tmp_path, transport,
                                                               no_trust_settings):
    before = _requests(tls["sim_port"])
    r = _run(tmp_path, _config(tmp_path, tls["here"]), transport)
    assert_one_line_error(r, 2, "gateway 'corp' (https://localhost:",
                          "its TLS certificate is not trusted",
                          "unable to get local issuer certificate", "SSL_CERT_FILE")
    assert _requests(tls["sim_port"]) == before  # no call reached the gateway


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_private_cas_bundle_in_ssl_cert_file_lets_the_run_through(tls, tmp_path,
                                                                     transport,
                                                                     no_trust_settings):
    before = _requests(tls["sim_port"])
    r = _run(tmp_path, _config(tmp_path, tls["here"]), transport,
             SSL_CERT_FILE=str(tls["bundle"]))
    assert r.returncode in (0, 3), r.stderr
    out = json.loads(r.stdout)
    assert (out["succeeded"], out["failed"]) == (5, 0), out
    assert _requests(tls["sim_port"]) - before == 5


def test_a_certificate_for_another_host_is_refused_as_such(tls, tmp_path, no_trust_settings):
    """Trusted issuer, wrong name: the line says so, and no CA bundle would help."""
    r = _run(tmp_path, _config(tmp_path, tls["other"]), "wire",
             SSL_CERT_FILE=str(tls["bundle"]))
    assert_one_line_error(r, 2, "its TLS certificate is not trusted",
                          "certificate is not valid for 'localhost'")
    assert "SSL_CERT_FILE" not in r.stderr


def _proxy(tmp_path: Path, creds: str | None = None,
           challenges: tuple[str, ...] = ("Basic realm=corp",)):
    """A forward proxy in its own process; yields its URL and its log's lines."""
    log = tmp_path / "proxy.log"
    log.touch()
    proc, port = script_server(PROXY.format(log=str(log), creds=creds,
                                            challenges=challenges))
    try:
        yield f"http://127.0.0.1:{port}", lambda: log.read_text().splitlines()
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def proxy(tmp_path):
    yield from _proxy(tmp_path)


PROXY_PASSWORD = "s3cret-proxy-pw"


@pytest.fixture
def locked_proxy(tmp_path):
    """One that lets through only `ops` with PROXY_PASSWORD."""
    yield from _proxy(tmp_path, f"ops:{PROXY_PASSWORD}")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_environments_proxy_carries_every_call(tls, tmp_path, transport, proxy,
                                                  no_trust_settings):
    """HTTP_PROXY for a gateway over http, HTTPS_PROXY (a CONNECT tunnel) for one over
    https: every request of the run goes through it, and NO_PROXY exempts a host."""
    url, relayed = proxy
    sim = tls["sim_port"]
    cfg = tmp_path / "plain.toml"
    cfg.write_text(f'[gateways.corp]\nbase_url = "http://127.0.0.1:{sim}/v1"\n'
                   'key_env = ["CORP_KEY"]\n')
    before = _requests(sim)
    r = _run(tmp_path, cfg, transport, HTTP_PROXY=url, NO_PROXY="")
    assert r.returncode in (0, 3), r.stderr
    assert _requests(sim) - before == 5
    lines = relayed()
    assert lines and all(f"http://127.0.0.1:{sim}/v1/" in ln for ln in lines), lines
    r = _run(tmp_path, _config(tmp_path, tls["here"]), transport, HTTPS_PROXY=url,
             NO_PROXY="", SSL_CERT_FILE=str(tls["bundle"]))
    assert r.returncode in (0, 3), r.stderr
    tunnels = relayed()[len(lines):]
    assert tunnels and all(ln == f"CONNECT localhost:{tls['here']}" for ln in tunnels), tunnels
    r = _run(tmp_path, cfg, transport, HTTP_PROXY=url, NO_PROXY="127.0.0.1")
    assert r.returncode in (0, 3), r.stderr
    assert len(relayed()) == len(lines) + len(tunnels)  # exempt: straight to the gateway
    # an address block, as curl reads it (the wire and aiohttp paths once ignored it)
    r = _run(tmp_path, cfg, transport, HTTP_PROXY=url, NO_PROXY="10.0.0.0/8, 127.0.0.0/8")
    assert r.returncode in (0, 3), r.stderr
    assert len(relayed()) == len(lines) + len(tunnels)


def test_an_alert_goes_out_through_the_proxy_too(tls, tmp_path, proxy, receiver,
                                                 no_trust_settings):
    url, relayed = proxy
    cfg = tmp_path / "hook.toml"
    cfg.write_text(f'[gateways.corp]\nbase_url = "http://127.0.0.1:{tls["sim_port"]}/v1"\n'
                   'key_env = ["CORP_KEY"]\n[[alerts.webhooks]]\nname = "pager"\n'
                   f'url = "http://127.0.0.1:{receiver.port}/hook"\n'
                   'events = ["run_finished"]\n[alerts]\ndrain_s = 5\n')
    cfg.chmod(0o600)
    r = _run(tmp_path, cfg, "wire", HTTP_PROXY=url, NO_PROXY="")
    assert r.returncode in (0, 3), r.stderr
    assert [a["kind"] for a in receiver.json()] == ["run_finished"]
    assert f"POST http://127.0.0.1:{receiver.port}/hook" in relayed()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_proxy_that_wants_a_password_is_named_and_the_password_never_shown(
        tls, tmp_path, transport, locked_proxy, no_trust_settings):
    """A company proxy answers 407 without its user and password: the line names the proxy
    and the variable it came from, not a rejected key or a raw transport error (six
    different lines before, over http and https on three transports); with the password in
    the variable's URL the run goes through, and the password is in no output or file."""
    url, relayed = locked_proxy
    sim = tls["sim_port"]
    plain = tmp_path / "plain.toml"
    plain.write_text(f'[gateways.corp]\nbase_url = "http://127.0.0.1:{sim}/v1"\n'
                     'key_env = ["CORP_KEY"]\n')
    over_tls = {"NO_PROXY": "", "SSL_CERT_FILE": str(tls["bundle"])}
    before = _requests(sim)
    r = _run(tmp_path, plain, transport, HTTP_PROXY=url, NO_PROXY="")
    assert_one_line_error(r, 2, f"its proxy {url} (HTTP_PROXY) asks for a user and password "
                          "(407 Proxy Authentication Required)", "~/.netrc")
    assert "rejected" not in r.stderr
    # without the preflight each call says so (not retried: a retry brings no password)
    r = swarm("--config", str(plain), "run", "--demo", "2", "--headless", "--quiet",
              "--json", "--transport", transport, "--no-preflight", timeout=120,
              env={"CORP_KEY": "sk-corp-0123456789abcdefghijklmn", "HTTP_PROXY": url,
                   "NO_PROXY": "", "no_proxy": "", "SWARM_TUI_DB": str(tmp_path / "calls.db")})
    assert json.loads(r.stdout)["failed"] == 2, r.stdout
    with sqlite3.connect(tmp_path / "calls.db") as db:
        said = db.execute("SELECT error_class, error_message FROM attempts").fetchall()
    assert said == [("other", "the proxy refused it: 407 Proxy Authentication Required")] * 2
    wrong = url.replace("http://", "http://ops:wrong-pw-4711@")
    r = _run(tmp_path, _config(tmp_path, tls["here"]), transport, HTTPS_PROXY=wrong, **over_tls)
    assert_one_line_error(r, 2, f"its proxy {url} (HTTPS_PROXY) refused the user and password "
                          "it was given (407")
    assert "wrong-pw-4711" not in r.stderr
    assert _requests(sim) == before and len(relayed()) == 4  # refused at the proxy
    right = url.replace("http://", f"http://ops:{PROXY_PASSWORD}@")
    r = _run(tmp_path, _config(tmp_path, tls["here"]), transport, HTTPS_PROXY=right, **over_tls)
    assert r.returncode in (0, 3), r.stderr
    assert _requests(sim) - before == 5
    kept = b"".join(f.read_bytes() for f in tmp_path.glob("runs.db*") if f.is_file())
    assert PROXY_PASSWORD not in r.stdout + r.stderr and PROXY_PASSWORD.encode() not in kept
    # the proxy down: "unreachable" names it (one transport's error names no host at all)
    dead = f"http://127.0.0.1:{free_port()}"
    r = _run(tmp_path, plain, transport, HTTP_PROXY=dead.replace("//", f"//ops:{PROXY_PASSWORD}@"),
             NO_PROXY="")
    assert_one_line_error(r, 2, f"unreachable through its proxy {dead} (HTTP_PROXY): ")
    assert PROXY_PASSWORD not in r.stderr


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_an_alert_the_proxy_refuses_says_so_and_is_not_retried(tls, tmp_path, scheme,
                                                               locked_proxy, receiver,
                                                               no_trust_settings):
    """The pager behind a proxy that wants a password: the run's log says the proxy
    refused it (its 407, over http as the answer, over https to the CONNECT), after one
    attempt — not a bare `ClientHttpProxyError` retried until the drain gave up on it."""
    url, relayed = locked_proxy
    cfg = tmp_path / "hook.toml"
    # the gateway by another name for the same host, exempt: only the pager is proxied
    cfg.write_text(f'[gateways.corp]\nbase_url = "http://localhost:{tls["sim_port"]}/v1"\n'
                   'key_env = ["CORP_KEY"]\n[[alerts.webhooks]]\nname = "pager"\n'
                   f'url = "{scheme}://127.0.0.1:{receiver.port}/hook"\n'
                   'events = ["run_finished"]\n[alerts]\ndrain_s = 20\n')
    cfg.chmod(0o600)
    r = _run(tmp_path, cfg, "wire", **{f"{scheme.upper()}_PROXY": url, "NO_PROXY": "localhost"})
    assert r.returncode in (0, 3), r.stderr
    with sqlite3.connect(tmp_path / "runs.db") as db:
        said = [d for (d,) in db.execute(
            "SELECT detail_json FROM events WHERE detail_json LIKE '%pager%'")]
    assert len(said) == 1 and "NOT delivered (the proxy refused it: HTTP 407" in said[0], said
    assert "after 1 attempt;" in said[0], said
    assert receiver.json() == [] and len(relayed()) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_built_in_simulator_never_goes_through_the_proxy(tmp_path, transport,
                                                             no_user_config):
    """The demo's simulator is this process's own child on loopback: with HTTP_PROXY set
    on the bastion (and no NO_PROXY) every call went to the proxy, which cannot reach it."""
    dead = f"http://127.0.0.1:{free_port()}"
    r = swarm("run", "--demo", "5", "--headless", "--quiet", "--json", "--transport",
              transport, timeout=120, env={"HTTP_PROXY": dead, "HTTPS_PROXY": dead,
                                           "http_proxy": dead, "NO_PROXY": "", "no_proxy": "",
                                           "SWARM_TUI_DB": str(tmp_path / "runs.db")})
    assert r.returncode in (0, 3), r.stderr
    assert json.loads(r.stdout)["succeeded"] == 5


# a server that sends every request elsewhere (argv[1]: its port)
MOVED = """
import sys
from aiohttp import web
async def moved(request):
    raise web.HTTPMovedPermanently("http://ops:pw@127.0.0.1:{target}" + request.path_qs)
app = web.Application()
app.router.add_route("*", "/{{tail:.*}}", moved)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_gateway_that_redirects_is_one_line_and_never_followed(tls, tmp_path, transport,
                                                                 no_trust_settings):
    sim = tls["sim_port"]
    proc, port = script_server(MOVED.format(target=sim))
    try:
        cfg = tmp_path / "moved.toml"
        cfg.write_text(f'[gateways.corp]\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                       'key_env = ["CORP_KEY"]\n')
        before = _requests(sim)
        r = _run(tmp_path, cfg, transport)
        assert_one_line_error(r, 2, "preflight failed (301): redirected to "
                              f"http://127.0.0.1:{sim}/v1/models; redirects are not followed",
                              "set base_url to the address it names")
        assert "pw" not in r.stderr and "rejected" not in r.stderr
        # without the preflight each call fails on its own, never sent on
        r = swarm("--config", str(cfg), "run", "--demo", "2", "--headless", "--quiet",
                  "--json", "--transport", transport, "--no-preflight", timeout=120,
                  env={"CORP_KEY": "sk-corp-0123456789abcdefghijklmn",
                       "SWARM_TUI_DB": str(tmp_path / "calls.db")})
        out = json.loads(r.stdout)
        assert (out["succeeded"], out["failed"]) == (0, 2), out
        assert _requests(sim) == before  # nothing reached the address it pointed to
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize(("transport", "scheme"), [
    ("wire", "http"), ("wire", "https"), ("aiohttp", "https"), ("httpx2", "http")])
def test_a_proxy_that_wants_a_windows_sign_in_says_which_and_what_to_run(
        tls, tmp_path, transport, scheme, no_trust_settings):
    """A Windows shop's proxy offers NTLM and Negotiate only: a user and password in the
    URL (sent as Basic) would be refused too, so the line says what it offers and what to
    run instead. (httpx2's refused CONNECT keeps no headers: over https it says the
    general 407 line.)"""
    gen = _proxy(tmp_path, "ops:irrelevant", ("NTLM", "Negotiate"))
    url, relayed = next(gen)
    try:
        port = tls["here"] if scheme == "https" else tls["sim_port"]
        host = "localhost" if scheme == "https" else "127.0.0.1"
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[gateways.corp]\nbase_url = "{scheme}://{host}:{port}/v1"\n'
                       'key_env = ["CORP_KEY"]\n')
        var = f"{scheme.upper()}_PROXY"
        r = _run(tmp_path, cfg, transport, **{var: url, "NO_PROXY": "",
                                               "SSL_CERT_FILE": str(tls["bundle"])})
        assert_one_line_error(
            r, 2, f"its proxy {url} ({var}) asks for a sign-in swarm-tui cannot give (NTLM, "
            "Negotiate; 407 Proxy Authentication Required)", "(cntlm, px)", f"point {var}")
        assert relayed(), "the proxy was not asked"
    finally:
        gen.close()
