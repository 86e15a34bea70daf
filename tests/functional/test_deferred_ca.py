"""aiohttp's CA loads, deferred (gateway/tls.py): each check runs in a fresh interpreter,
where the first import of aiohttp is the one that builds its contexts.

Compared with the real thing: the verified context's every setting against the standard
library's own `create_default_context()`, and its certificates against a stock context's
once loaded; a TLS server whose certificate a test CA issued is reached (the CA trusted
through SSL_CERT_FILE) by a session that never asked for the load, and one from another
CA is refused."""

from __future__ import annotations

import json
import subprocess
import sys

import trustme

FACTS = r"""
import json, ssl
load, paths = ssl.SSLContext.load_default_certs, ssl.SSLContext.set_default_verify_paths
import swarm_tui.gateway.wire
import aiohttp.connector as c
v, u = c._SSL_CONTEXT_VERIFIED, c._SSL_CONTEXT_UNVERIFIED
stock = ssl.create_default_context()
stock.set_alpn_protocols(("http/1.1",))
same = {a: getattr(v, a) == getattr(stock, a) for a in (
    "verify_mode", "check_hostname", "options", "verify_flags", "minimum_version",
    "maximum_version", "protocol", "post_handshake_auth", "keylog_filename")}
same["ciphers"] = v.get_ciphers() == stock.get_ciphers()
facts = {"kind": type(v).__name__, "pending_at_import": v._pending is not None,
         "same": same, "unverified_certs": u.cert_store_stats()["x509"],
         "unverified_mode": int(u.verify_mode),
         "restored": ssl.SSLContext.load_default_certs is load
                     and ssl.SSLContext.set_default_verify_paths is paths,
         "stock_certs": stock.cert_store_stats()["x509_ca"]}
facts["loaded_certs"] = v.cert_store_stats()["x509_ca"]
print(json.dumps(facts))
"""


def _python(code: str, **env: str) -> dict:
    import os

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, env={**os.environ, **env})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_verified_context_is_the_stdlibs_with_its_bundle_loaded_later():
    f = _python(FACTS)
    assert f["kind"] == "DeferredCAContext" and f["pending_at_import"], f
    assert all(f["same"].values()), f["same"]
    assert f["restored"], "ssl's methods were left patched after the import"
    # the unverified context checks nothing and loaded nothing
    assert f["unverified_mode"] == 0 and f["unverified_certs"] == 0, f
    # once used, the same certificates as a context the standard library made
    assert f["stock_certs"] > 0 and f["loaded_certs"] == f["stock_certs"], f


CONNECT = r"""
import asyncio, json, ssl, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from swarm_tui.gateway.tls import aiohttp
import aiohttp.connector as c

class Ok(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a): pass

def serve(cert):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(cert)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd.server_address[1]

trusted, stranger = serve(sys.argv[1]), serve(sys.argv[2])
pending_before = c._SSL_CONTEXT_VERIFIED._pending is not None

async def main():
    out = {"pending_before": pending_before}
    async with aiohttp.ClientSession() as s:  # the default: aiohttp's verified context
        async with s.get(f"https://localhost:{trusted}/") as r:
            out["trusted"] = [r.status, await r.text()]
        try:
            async with s.get(f"https://localhost:{stranger}/") as r:
                out["stranger"] = r.status
        except aiohttp.ClientConnectorCertificateError as e:
            out["stranger"] = "refused: " + str(e.certificate_error.verify_message)
    out["pending_after"] = c._SSL_CONTEXT_VERIFIED._pending is not None
    print(json.dumps(out))

asyncio.run(main())
"""


def test_a_first_connection_loads_the_bundle_and_still_refuses_a_stranger(tmp_path):
    ours, theirs = trustme.CA(), trustme.CA()
    bundle, good, bad = tmp_path / "ca.pem", tmp_path / "good.pem", tmp_path / "bad.pem"
    ours.cert_pem.write_to_path(str(bundle))
    ours.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(good))
    theirs.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(bad))
    f = _python(CONNECT.replace("sys.argv[1]", repr(str(good)))
                .replace("sys.argv[2]", repr(str(bad))), SSL_CERT_FILE=str(bundle))
    assert f["pending_before"] and not f["pending_after"], f
    assert f["trusted"] == [200, "ok"], f
    assert f["stranger"] == "refused: unable to get local issuer certificate", f


def test_every_way_a_run_or_worker_imports_aiohttp_goes_through_the_deferral():
    """The first import of aiohttp in a process builds its contexts: from each module a
    run, a worker or an alert reaches it by, it is gateway/tls.py's."""
    for module in ("swarm_tui.run.wiring", "swarm_tui.run.workers", "swarm_tui.ops.webhooks",
                   "swarm_tui.gateway.client", "swarm_tui.engine.runner"):
        f = _python(f"import json, {module}; import aiohttp.connector as c; "
                    "print(json.dumps({'kind': type(c._SSL_CONTEXT_VERIFIED).__name__}))")
        assert f["kind"] == "DeferredCAContext", module
