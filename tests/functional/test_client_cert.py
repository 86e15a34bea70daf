"""A gateway behind mutual TLS (a company's zero-trust ingress): it asks each client for a
certificate its own CA issued. On every transport: shown one, the run goes through and
the gateway counts exactly the calls paid for; without one, or with one another CA issued,
the preflight is one line and exit 2 before any call. The private key is a credential:
world-readable, encrypted (a passphrase would be prompted for and hang the run), or not
the certificate's own, it is one line before anything is sent — and its bytes appear
nowhere. The TLS front is its own process (a third party's), the simulator behind it."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
import trustme

from tests.conftest import assert_one_line_error, script_server, start_sim_process, swarm

TRANSPORTS = ["wire", "aiohttp", "httpx2"]
KEY = "sk-corp-0123456789abcdefghijklmn"

# TLS in front of a plain HTTP server that asks every client for a certificate its CA
# (argv: the port) issued, bytes relayed both ways. Blocking sockets: a failed handshake
# sends its alert to the client ("certificate required", "unknown ca") before the
# connection closes
MTLS_FRONT = """
import socket, ssl, sys, threading
ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain({cert!r})
ctx.load_verify_locations({client_ca!r})
ctx.verify_mode = ssl.CERT_REQUIRED
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
def serve(raw):
    tls = ctx.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
    try:
        tls.do_handshake()
    except (OSError, ssl.SSLError):
        # closed as an ingress closes (nginx's lingering close): the alert is out, what the
        # client already wrote is read and dropped, then the socket closes. Closed at
        # once, the request still unread makes the kernel reset the connection, and the
        # reset can overtake the alert at the client: it sees "connection reset" only
        plain = socket.socket(fileno=tls.detach())
        try:
            plain.shutdown(socket.SHUT_WR)
            plain.settimeout(5)
            while plain.recv(65536):
                pass
        except OSError:
            pass
        plain.close()
        return
    up = socket.create_connection(("127.0.0.1", {target}))
    threading.Thread(target=pipe, args=(tls, up), daemon=True).start()
    pipe(up, tls)
listener = socket.create_server(("127.0.0.1", int(sys.argv[1])))
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


@pytest.fixture(scope="module")
def ingress(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mtls")
    server_ca, client_ca, stranger_ca = trustme.CA(), trustme.CA(), trustme.CA()
    files = {name: tmp / f"{name}.pem" for name in (
        "bundle", "server", "client_ca", "cert", "key", "both", "stranger_cert",
        "stranger_key", "encrypted_key")}
    server_ca.cert_pem.write_to_path(str(files["bundle"]))
    server_ca.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(
        str(files["server"]))
    client_ca.cert_pem.write_to_path(str(files["client_ca"]))
    ours = client_ca.issue_cert("swarm-tui@bastion")
    ours.cert_chain_pems[0].write_to_path(str(files["cert"]))
    ours.private_key_pem.write_to_path(str(files["key"]))
    ours.private_key_and_cert_chain_pem.write_to_path(str(files["both"]))
    theirs = stranger_ca.issue_cert("swarm-tui@bastion")
    theirs.cert_chain_pems[0].write_to_path(str(files["stranger_cert"]))
    theirs.private_key_pem.write_to_path(str(files["stranger_key"]))
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(ours.private_key_pem.bytes(), password=None)
    files["encrypted_key"].write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"correct horse")))
    for name in ("key", "both", "stranger_key", "encrypted_key"):
        files[name].chmod(0o600)
    sim, sim_port = start_sim_process("--profile", "fixed:20")
    front, port = script_server(MTLS_FRONT.format(
        cert=str(files["server"]), client_ca=str(files["client_ca"]), target=sim_port))
    try:
        yield {"port": port, "sim_port": sim_port, **files}
    finally:
        for proc in (front, sim):
            proc.terminate()
            proc.wait(10)


def _requests(sim_port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{sim_port}/sim/stats", timeout=10) as r:
        return int(json.load(r).get("requests", 0))


def _run(tmp_path: Path, ingress: dict, transport: str = "wire", *flags: str,
         **fields: Path | str):
    cfg = tmp_path / "c.toml"
    lines = [f'[gateways.corp]\nbase_url = "https://localhost:{ingress["port"]}/v1"',
             'key_env = ["CORP_KEY"]']
    lines += [f'{k} = "{v}"' for k, v in fields.items()]
    cfg.write_text("\n".join(lines) + "\n")
    return swarm("--config", str(cfg), "run", "--demo", "5", "--headless", "--quiet",
                 "--json", "--transport", transport, *flags, timeout=120,
                 env={"CORP_KEY": KEY, "SWARM_TUI_DB": str(tmp_path / "runs.db"),
                      "XDG_CONFIG_HOME": str(tmp_path / "x"),
                      "SSL_CERT_FILE": str(ingress["bundle"])})


def _key_bytes_nowhere(tmp_path: Path, ingress: dict, r) -> None:
    secret = ingress["key"].read_text().splitlines()[1]  # a line of the key's base64
    assert secret not in r.stdout + r.stderr
    for stored in (p for p in tmp_path.glob("runs.db*") if p.is_file()):
        assert secret.encode() not in stored.read_bytes(), stored


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_shown_its_certificate_the_gateway_lets_every_call_through(tmp_path, ingress,
                                                                   transport):
    before = _requests(ingress["sim_port"])
    r = _run(tmp_path, ingress, transport, client_cert=ingress["cert"],
             client_key=ingress["key"])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["succeeded"] == 5
    # five calls through the ingress: nothing sent twice, nothing lost
    assert _requests(ingress["sim_port"]) - before == 5
    _key_bytes_nowhere(tmp_path, ingress, r)


def test_one_pem_file_holding_certificate_and_key_is_enough(tmp_path, ingress):
    r = _run(tmp_path, ingress, client_cert=ingress["both"])
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_without_a_certificate_the_preflight_says_it_asks_for_one(tmp_path, ingress,
                                                                  transport):
    before = _requests(ingress["sim_port"])
    r = _run(tmp_path, ingress, transport)
    assert_one_line_error(r, 2, "gateway 'corp' (https://localhost:",
                          "asks for a client certificate (",
                          "[gateways.corp] client_cert (and client_key)")
    assert _requests(ingress["sim_port"]) == before  # nothing reached it


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_without_the_preflight_each_call_says_so_once_and_is_not_retried(tmp_path, ingress,
                                                                        transport):
    """A retry would show the same certificate (none): once the gateway's alert is read, the
    task ends there, `other`, said in words. (Over TLS 1.3 the request goes out as the
    handshake ends, so the alert can lose the race to a reset: such an attempt is a
    connection error, retried as one, until the alert is what comes back — or until the
    task's attempts are spent, all of them lost races: one task of five did, once, in a
    whole suite on a fresh machine.)"""
    r = _run(tmp_path, ingress, transport, "--no-preflight")
    assert json.loads(r.stdout)["failed"] == 5, r.stdout + r.stderr
    import sqlite3

    from swarm_tui.settings.run_sections import RetryConfig

    with sqlite3.connect(tmp_path / "runs.db") as db:
        rows = db.execute("SELECT seq, error_class, error_message FROM attempts "
                          "ORDER BY seq, number").fetchall()
    tasks: dict[int, list[tuple[str, str]]] = {}
    for seq, cls, msg in rows:
        tasks.setdefault(seq, []).append((cls, msg))
    assert len(tasks) == 5, rows
    told = 0
    for attempts in tasks.values():
        # never retried after the alert: every attempt before the last lost the race
        assert all(cls == "connection" for cls, _ in attempts[:-1]), attempts
        cls, msg = attempts[-1]
        if cls == "other":
            assert msg.startswith("the gateway refused the client certificate ("), attempts
            told += 1
        else:  # its attempts spent, each a lost race
            assert cls == "connection" and len(attempts) == RetryConfig().max_attempts, attempts
    assert told >= 1, tasks  # the run says why, in words


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_certificate_another_ca_issued_is_refused_as_such(tmp_path, ingress, transport):
    r = _run(tmp_path, ingress, transport, client_cert=ingress["stranger_cert"],
             client_key=ingress["stranger_key"])
    assert_one_line_error(r, 2, "refused the client certificate it was shown (",
                          "check client_cert / client_key in [gateways.corp]")


def test_a_key_every_user_can_read_is_refused_before_anything_is_sent(tmp_path, ingress):
    before = _requests(ingress["sim_port"])
    shared = tmp_path / "shared.key"
    shared.write_bytes(ingress["key"].read_bytes())
    shared.chmod(0o644)
    r = _run(tmp_path, ingress, client_cert=ingress["cert"], client_key=shared)
    assert_one_line_error(r, 2, f"gateway 'corp': client_key {shared}: readable by every "
                          "user of this host (mode 644); chmod 600 it")
    assert _requests(ingress["sim_port"]) == before
    _key_bytes_nowhere(tmp_path, ingress, r)


def test_an_encrypted_key_is_one_line_not_a_passphrase_prompt(tmp_path, ingress):
    """With a terminal, OpenSSL would ask for the passphrase and wait: a headless run on a
    bastion would hang there. No passphrase is ever asked for."""
    from tests.pty_harness import PtyApp

    cfg_dir = tmp_path / "cfg"
    cfg_dir.mkdir()
    r = _run(cfg_dir, ingress, client_cert=ingress["cert"],
             client_key=ingress["encrypted_key"])
    assert_one_line_error(r, 2, "client_key", "encrypted with a passphrase",
                          "openssl pkey -in KEY -out KEY.plain")
    # and on a terminal, where a prompt would be read from it: the same line, no prompt
    pty = PtyApp("--config", str(cfg_dir / "c.toml"), "run", "--demo", "5", "--headless",
                 "--quiet", env={"CORP_KEY": KEY, "SWARM_TUI_DB": str(tmp_path / "pty.db"),
                                 "SSL_CERT_FILE": str(ingress["bundle"])}, cols=200)
    try:
        assert pty.wait(60) == 2
        said = bytes(pty.raw).decode(errors="replace")
    finally:
        pty.kill()
    assert "encrypted with a passphrase" in said and "pass phrase" not in said, said


def test_a_key_that_is_not_the_certificates_own_is_one_line(tmp_path, ingress):
    r = _run(tmp_path, ingress, client_cert=ingress["cert"], client_key=ingress["stranger_key"])
    assert_one_line_error(r, 2, "do not belong together (key values mismatch)")


@pytest.mark.parametrize(("base", "fields", "said"), [
    ("http://localhost:1/v1", 'client_cert = "c.pem"', "base_url must be https://"),
    ("https://localhost:1/v1", 'client_key = "k.pem"', "client_key without client_cert"),
])
def test_a_client_certificate_that_cannot_be_used_is_a_config_error(tmp_path, base, fields,
                                                                    said):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[gateways.corp]\nbase_url = "{base}"\nkey_env = ["CORP_KEY"]\n{fields}\n')
    r = swarm("--config", str(cfg), "run", "--demo", "1", "--headless", "--quiet",
              env={"CORP_KEY": KEY, "SWARM_TUI_DB": str(tmp_path / "runs.db")})
    assert_one_line_error(r, 2, f"config {cfg}", said)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_certificate_is_shown_through_the_bastions_proxy_too(tmp_path, ingress,
                                                                 transport):
    """HTTPS_PROXY's CONNECT tunnel, then the client certificate inside it."""
    from tests.functional.test_gateway_egress import _proxy

    gen = _proxy(tmp_path)
    url, relayed = next(gen)
    try:
        before = _requests(ingress["sim_port"])
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[gateways.corp]\nbase_url = "https://localhost:{ingress["port"]}/v1"\n'
                       f'key_env = ["CORP_KEY"]\nclient_cert = "{ingress["cert"]}"\n'
                       f'client_key = "{ingress["key"]}"\n')
        r = swarm("--config", str(cfg), "run", "--demo", "5", "--headless", "--quiet",
                  "--json", "--transport", transport, timeout=120,
                  env={"CORP_KEY": KEY, "SWARM_TUI_DB": str(tmp_path / "runs.db"),
                       "SSL_CERT_FILE": str(ingress["bundle"]), "HTTPS_PROXY": url,
                       "NO_PROXY": "", "no_proxy": ""})
        assert r.returncode == 0, r.stderr
        assert _requests(ingress["sim_port"]) - before == 5
        assert f"CONNECT localhost:{ingress['port']}" in relayed()
    finally:
        gen.close()
