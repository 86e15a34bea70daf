"""SHA-256 for the reading commands' small inputs (a config file, a key's fingerprint, a
database path), without loading OpenSSL.

`import hashlib` initialises OpenSSL's `_hashlib` first: ~2.5 ms of a command whose whole
start is ~50 ms (issue 34). CPython's own SHA-256 (`_sha256` up to 3.11, `_sha2` from
3.12) is the same function — identical digests, which a unit test holds against
hashlib's — and loads in ~0.15 ms. Slower per byte than OpenSSL's, which does not matter
for a few kilobytes; bulk hashing (a workload's tasks) keeps hashlib.
"""

from __future__ import annotations

import sys
from typing import Any


def sha256(data: bytes = b"") -> Any:
    """A SHA-256 hash object (update / hexdigest), as hashlib.sha256 gives."""
    try:
        if sys.version_info >= (3, 12):
            from _sha2 import sha256 as make
        else:
            from _sha256 import sha256 as make
    except ImportError:  # a build without CPython's own: OpenSSL's
        from hashlib import sha256 as make
    return make(data)


def sha256_hex(data: bytes) -> str:
    return str(sha256(data).hexdigest())
