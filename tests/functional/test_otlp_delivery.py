"""Spans to an OTLP collector as a bastion has one: over https with the company's CA (the
one SSL_CERT_FILE names for the gateway), on a host whose REQUESTS_CA_BUNDLE names the
system's bundle — and, when the collector cannot take them, one line saying how many were
lost and why, not the exporter's retry lines. Each run is the real binary; the collector
is a local receiver that counts what it was sent."""

from __future__ import annotations

import json
import shutil
import sqlite3
import ssl

import pytest
import trustme

from tests.conftest import Receiver, free_port, swarm

SYSTEM_BUNDLE = ssl.get_default_verify_paths().openssl_cafile


@pytest.fixture
def company_ca(tmp_path):
    ca = trustme.CA()
    bundle, cert = tmp_path / "corp-ca.pem", tmp_path / "collector.pem"
    ca.cert_pem.write_to_path(str(bundle))
    ca.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(cert))
    return bundle, cert


@pytest.fixture
def tls_collector(company_ca):
    r = Receiver()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(company_ca[1]))
    r.server.socket = ctx.wrap_socket(r.server.socket, server_side=True)
    yield r
    r.close()


def _spans(posts: list[tuple[str, bytes]]) -> int:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    n = 0
    for path, body in posts:
        assert path == "/v1/traces"
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        n += sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
    return n


def _run(tmp_path, endpoint: str, **env: str | None):
    """None: the variable unset (the caller deletes it from this process's environment)."""
    cfg = tmp_path / "otel.toml"
    cfg.write_text(f'[telemetry]\notlp_endpoint = "{endpoint}"\n')
    cfg.chmod(0o600)
    base = {"SWARM_TUI_DB": str(tmp_path / "runs.db"), "XDG_CONFIG_HOME": str(tmp_path / "x"),
            # as on many hosts (this one's image too): requests' own variables name the
            # system's bundle, which has no company CA in it
            "REQUESTS_CA_BUNDLE": SYSTEM_BUNDLE, "CURL_CA_BUNDLE": SYSTEM_BUNDLE,
            "SSL_CERT_FILE": "", "OTEL_EXPORTER_OTLP_CERTIFICATE": "",
            "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": ""}
    given = {k: v for k, v in {**base, **env}.items() if v is not None}
    return swarm("run", "--demo", "12", "--headless", "--json", "--quiet", "--config", str(cfg),
                 "--sim-profile", "fixed:20", "--sim-rate-429", "0", "--sim-rate-503", "0",
                 env=given, timeout=120)


def _logged(tmp_path) -> list[str]:
    with sqlite3.connect(tmp_path / "runs.db") as db:
        return [d for (d,) in db.execute(
            "SELECT detail_json FROM events WHERE detail_json LIKE '%telemetry%'")]


def test_the_company_ca_that_reaches_the_gateway_reaches_the_collector(tmp_path, company_ca,
                                                                       tls_collector):
    """Before: certifi's bundle or REQUESTS_CA_BUNDLE was checked, every span refused."""
    r = _run(tmp_path, f"https://localhost:{tls_collector.port}",
             SSL_CERT_FILE=str(company_ca[0]))
    assert r.returncode == 0, r.stderr
    assert _spans(tls_collector.posts) == json.loads(r.stdout)["calls"] == 12
    assert r.stderr == "" and _logged(tmp_path) == []


def test_a_collector_whose_ca_is_not_trusted_is_one_line_with_the_count(tmp_path,
                                                                        tls_collector):
    r = _run(tmp_path, f"https://localhost:{tls_collector.port}")
    assert r.returncode == 0, r.stderr  # telemetry lost is no failed run
    line = (f"swarm-tui: warning: telemetry: 12 of 12 spans NOT delivered to "
            f"https://localhost:{tls_collector.port}/v1/traces (certificate verify failed: "
            "unable to get local issuer certificate; the collector's CA is read from "
            "SSL_CERT_FILE (or OTEL_EXPORTER_OTLP_CERTIFICATE))")
    assert r.stderr.splitlines() == [line], r.stderr  # not the exporter's retry lines
    assert tls_collector.posts == []
    assert _logged(tmp_path) == [line.removeprefix("swarm-tui: warning: ")]


def test_the_exporters_own_variable_names_the_collectors_ca(tmp_path, company_ca,
                                                            tls_collector):
    """OTEL_EXPORTER_OTLP_CERTIFICATE is telemetry's own: it applies (requests' variables
    had replaced it too)."""
    r = _run(tmp_path, f"https://localhost:{tls_collector.port}",
             OTEL_EXPORTER_OTLP_CERTIFICATE=str(company_ca[0]))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert _spans(tls_collector.posts) == 12


@pytest.mark.parametrize("case", ["down", "refuses"])
def test_a_collector_down_or_refusing_is_said_and_its_password_is_not(tmp_path, case):
    receiver = Receiver(status=401) if case == "refuses" else None
    port = receiver.port if receiver else free_port()
    try:
        r = _run(tmp_path, f"http://otel:hunter2pw@127.0.0.1:{port}")
    finally:
        if receiver is not None:
            receiver.close()
    assert r.returncode == 0, r.stderr
    why = "HTTP 401 Unauthorized" if case == "refuses" else "Connection refused"
    assert len(r.stderr.splitlines()) == 1 and why in r.stderr, r.stderr
    assert f"12 of 12 spans NOT delivered to http://***@127.0.0.1:{port}/v1/traces" in r.stderr
    assert "hunter2pw" not in r.stderr + r.stdout
    for stored in (p for p in tmp_path.glob("runs.db*") if p.is_file()):
        assert b"hunter2pw" not in stored.read_bytes(), stored


@pytest.mark.skipif(shutil.which("openssl") is None,
                    reason="names the CA by OpenSSL's subject hash: needs the openssl command")
def test_a_company_ca_given_as_a_hashed_folder_is_honoured_too(tmp_path, company_ca,
                                                               tls_collector, monkeypatch):
    """SSL_CERT_DIR alone (a c_rehash'd folder, as some hosts keep their CAs): SSL_CERT_FILE
    unset, so the system's bundle file is there too — and is not what was named."""
    import subprocess

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    folder = tmp_path / "certs"
    folder.mkdir()
    digest = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", str(company_ca[0])],
                            capture_output=True, text=True, check=True).stdout.strip()
    (folder / f"{digest}.0").write_bytes(company_ca[0].read_bytes())
    r = _run(tmp_path, f"https://localhost:{tls_collector.port}", SSL_CERT_DIR=str(folder),
             SSL_CERT_FILE=None)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert _spans(tls_collector.posts) == 12


def test_a_proxy_that_refuses_the_collector_is_said_as_such(tmp_path, company_ca,
                                                            tls_collector):
    """A collector outside the bastion, through its proxy: carried (the proxy logs the
    CONNECT), and a proxy that wants a password is named as what refused the spans."""
    from tests.functional.test_gateway_egress import _proxy

    for creds, delivered in ((None, 12), ("ops:pw", 0)):
        gen = _proxy(tmp_path, creds)
        url, relayed = next(gen)
        try:
            n = len(tls_collector.posts)
            r = _run(tmp_path, f"https://localhost:{tls_collector.port}",
                     SSL_CERT_FILE=str(company_ca[0]), HTTPS_PROXY=url, NO_PROXY="",
                     no_proxy="")
            assert r.returncode == 0, r.stderr
            assert _spans(tls_collector.posts[n:]) == delivered
            assert relayed() and relayed()[-1] == f"CONNECT localhost:{tls_collector.port}"
            if delivered:
                assert r.stderr == ""
            else:
                assert r.stderr.splitlines() == [
                    f"swarm-tui: warning: telemetry: 12 of 12 spans NOT delivered to https://"
                    f"localhost:{tls_collector.port}/v1/traces (the proxy refused it: 407 "
                    "Proxy Authentication Required)"], r.stderr
        finally:
            gen.close()
