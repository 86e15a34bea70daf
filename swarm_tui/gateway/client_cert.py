"""A gateway that asks for a client certificate (mutual TLS, as a company's zero-trust
ingress does): `client_cert` / `client_key` in its [gateways.NAME] table.

The context is the standard library's default one (the host's CAs, SSL_CERT_FILE) with
the certificate loaded, built once per gateway before anything is sent. The private key
is a credential: a key file every user of the host can read is refused (a group may, as
for `serve`'s key: Debian's ssl-cert keys are 0640), an encrypted key is refused rather
than prompted for (a run has no one to type a passphrase, and a prompt would hang it),
and neither file's contents ever reach a line we print.
"""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

from swarm_tui.errors import UserError


class _Encrypted(Exception):
    pass


def world_readable_key(path: Path) -> str | None:
    """Why a private key file may not be used: every user of this host can read it (or it
    cannot be read at all); None when it may."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError as e:
        return e.strerror or str(e)
    if mode & stat.S_IRWXO:
        return (f"readable by every user of this host (mode {mode:o}); chmod 600 it (640 for "
                "a group such as ssl-cert)")
    return None


def _no_passphrase() -> bytes:
    raise _Encrypted


def client_tls(where: str, cert: Path, key: Path | None) -> ssl.SSLContext:
    """The gateway's TLS context with its client certificate; one line when it cannot be."""
    cert, key = cert.expanduser(), key.expanduser() if key is not None else None
    holder = key or cert  # the file the private key is in
    problem = world_readable_key(holder)
    if problem is not None:
        field = "client_key" if key is not None else "client_cert (it holds the key)"
        raise UserError(f"{where}: {field} {holder}: {problem}")
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except _Encrypted:
        raise UserError(f"{where}: client_key {holder}: encrypted with a passphrase, which a "
                        "run cannot be asked for; give it an unencrypted copy, owner-only "
                        "(openssl pkey -in KEY -out KEY.plain; chmod 600 KEY.plain)") from None
    except FileNotFoundError as e:
        raise UserError(f"{where}: client certificate: {e.filename or cert}: not found"
                        ) from None
    except ssl.SSLError as e:
        why = (e.reason or str(e)).lower().replace("_", " ")
        if "key values mismatch" in why:
            raise UserError(f"{where}: client_cert {cert} and its key {holder} do not belong "
                            "together (key values mismatch)") from None
        raise UserError(f"{where}: client_cert {cert} / key {holder}: not a PEM certificate "
                        f"and unencrypted private key ({why})") from None
    except OSError as e:
        raise UserError(f"{where}: client certificate {cert}: {e.strerror or e}") from None
    return context
