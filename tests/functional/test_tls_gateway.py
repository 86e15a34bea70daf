"""A gateway over https: its certificate checked the way OpenSSL checks it, on every
transport. The real binary against the simulator behind a TLS front (its own process)
whose certificate a test CA (trustme) issued: untrusted, it is one line and exit 2 at the
preflight, before any call; trusted through SSL_CERT_FILE, the run goes through."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
import trustme

from tests.conftest import assert_one_line_error, script_server, start_sim_process, swarm

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
