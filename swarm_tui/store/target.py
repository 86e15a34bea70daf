"""Which database: a SQLite file (the embedded default) or a PostgreSQL server by URL.

Kept free of the drivers' imports: every command resolves its target, few open a server.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import platformdirs

SCHEMES = ("postgresql://", "postgres://")


def is_pg_url(raw: str) -> bool:
    return raw.startswith(SCHEMES)


@dataclass(frozen=True)
class PgTarget:
    """A PostgreSQL database named by URL. Printed without its password, if it has one."""

    url: str

    def __str__(self) -> str:
        parts = urlsplit(self.url)
        if parts.password is None:
            return self.url
        host = parts.netloc.rsplit("@", 1)[1]
        return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))

    @property
    def has_password(self) -> bool:
        return urlsplit(self.url).password is not None

    @property
    def tag(self) -> str:
        """Names this database's files on this host (locks, journals): no password in it."""
        return hashlib.sha256(str(self).encode()).hexdigest()[:10]

    def local_dir(self) -> Path:
        """This host's files for this database: executor locks and unsaved-row journals."""
        return platformdirs.user_state_path("swarm-tui") / f"pg-{self.tag}"


DbTarget = Path | PgTarget


def missing_file(target: DbTarget) -> bool:
    """A database file that does not exist yet (a server's schema is checked on opening)."""
    return isinstance(target, Path) and not target.exists()
