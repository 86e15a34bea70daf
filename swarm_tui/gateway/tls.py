"""aiohttp, imported with the CA bundle's loading deferred to where a certificate is checked.

aiohttp builds its two client TLS contexts when it is imported (so that no connection
blocks the loop reading files), and each loads the system's whole CA bundle: ~40 ms apiece
here with OpenSSL 3 (cpython#95031) — ~80 ms of every run's, worker's and console's start.
One of them verifies nothing (`ssl=False`, never used by us); the other is used only by an
https gateway, receiver or proxy. Imported through this module:

- the verified context is the standard library's own `create_default_context()`, every
  setting as it makes it, except that `load_default_certs` is postponed: the context is a
  DeferredCAContext that loads the bundle before its first TLS connection, or when
  `load_deferred()` is called — which the wire client and the webhook sender do as they
  are built for an https address, before any call is in flight (a load is never a stall
  of the running swarm's loop);
- the unverified context skips the load (CERT_NONE: it has no certificate to check).

Anything that goes wrong here fails closed: a context whose bundle never loaded refuses
every certificate.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import weakref
from collections.abc import Iterator
from typing import Any

_LOCK = threading.Lock()
_DEFERRED: weakref.WeakSet[DeferredCAContext] = weakref.WeakSet()


class DeferredCAContext(ssl.SSLContext):
    """A context whose `load_default_certs(purpose)` waits for its first use."""

    _pending: ssl.Purpose | None = None

    def load_now(self) -> None:
        if self._pending is None:
            return
        with _LOCK:  # two threads' first connections: one loads, the other waits for it
            purpose = self._pending
            if purpose is not None:
                ssl.SSLContext.load_default_certs(self, purpose)
                self._pending = None

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self.load_now()
        return super().wrap_socket(*args, **kwargs)

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self.load_now()
        return super().wrap_bio(*args, **kwargs)

    def get_ca_certs(self, binary_form: bool = False) -> Any:
        self.load_now()
        return super().get_ca_certs(binary_form)

    def cert_store_stats(self) -> dict[str, int]:
        self.load_now()
        return super().cert_store_stats()


def load_deferred() -> None:
    """Load every deferred bundle now: called as a client for an https address is built,
    so that its first connection does not read the bundle on the running loop."""
    for ctx in list(_DEFERRED):
        ctx.load_now()


@contextlib.contextmanager
def _ca_loads_deferred() -> Iterator[None]:
    """While aiohttp is imported: the stdlib's CA loading, postponed (see the module)."""
    load_default_certs = ssl.SSLContext.load_default_certs
    set_default_verify_paths = ssl.SSLContext.set_default_verify_paths

    def defer(self: ssl.SSLContext, purpose: ssl.Purpose = ssl.Purpose.SERVER_AUTH) -> None:
        if type(self) is not ssl.SSLContext:  # someone's own subclass: as it asks
            load_default_certs(self, purpose)
            return
        self.__class__ = DeferredCAContext  # same layout: only the methods above differ
        assert isinstance(self, DeferredCAContext)
        self._pending = purpose
        _DEFERRED.add(self)

    def unless_unverified(self: ssl.SSLContext) -> None:
        if self.verify_mode != ssl.CERT_NONE:
            set_default_verify_paths(self)

    ssl.SSLContext.load_default_certs = defer  # type: ignore[method-assign]
    ssl.SSLContext.set_default_verify_paths = unless_unverified  # type: ignore[method-assign]
    try:
        yield
    finally:
        ssl.SSLContext.load_default_certs = load_default_certs  # type: ignore[method-assign]
        ssl.SSLContext.set_default_verify_paths = (  # type: ignore[method-assign]
            set_default_verify_paths)


with _ca_loads_deferred():
    import aiohttp  # the first import in a process is the one that builds the contexts

__all__ = ["DeferredCAContext", "aiohttp", "load_deferred"]
