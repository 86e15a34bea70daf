"""Which database: a SQLite file (the embedded default) or a PostgreSQL server by URL.

Kept free of the drivers' imports: every command resolves its target, few open a server.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from swarm_tui.core.record import record
from swarm_tui.errors import UserError

SCHEMES = ("postgresql://", "postgres://")


def is_pg_url(raw: str) -> bool:
    return raw.startswith(SCHEMES)


# libpq connection parameters that carry a secret (`?password=…` works as userinfo does)
SECRET_PARAMS = frozenset({"password", "sslpassword"})


@record(frozen=True)
class PgTarget:
    """A PostgreSQL database named by URL. Printed without its secrets (a password in the
    userinfo or as a `password=` / `sslpassword=` parameter), if it has any."""

    url: str

    def __str__(self) -> str:
        parts = urlsplit(self.url)
        if parts.password is not None:
            host = parts.netloc.rsplit("@", 1)[1]
            parts = parts._replace(netloc=f"{parts.username}:***@{host}")
        if self._secret_params():
            parts = parts._replace(query=urlencode(
                [(k, "***" if k.lower() in SECRET_PARAMS else v)
                 for k, v in parse_qsl(parts.query, keep_blank_values=True)], safe="*"))
        return urlunsplit(parts)

    def _secret_params(self) -> bool:
        query = urlsplit(self.url).query
        return any(k.lower() in SECRET_PARAMS
                   for k, _ in parse_qsl(query, keep_blank_values=True))

    @property
    def has_password(self) -> bool:
        return urlsplit(self.url).password is not None or self._secret_params()

    @property
    def tag(self) -> str:
        """Names this database's files on this host (locks, journals): no password in it."""
        from swarm_tui.digest import sha256_hex

        return sha256_hex(str(self).encode())[:10]

    def local_dir(self) -> Path:
        """This host's files for this database: executor locks and unsaved-row journals."""
        from swarm_tui.paths import state_dir

        return state_dir() / f"pg-{self.tag}"


DbTarget = Path | PgTarget


def missing_file(target: DbTarget) -> bool:
    """A database file that does not exist yet (a server's schema is checked on opening)."""
    return isinstance(target, Path) and not target.exists()


def db_error(path: DbTarget, exc: BaseException) -> UserError:
    """Map sqlite's errors to one line that names the file and what to do."""
    msg = str(exc).lower()
    if isinstance(path, PgTarget):
        return UserError(f"database {path}: {exc}")
    if "locked" in msg or "busy" in msg:
        from swarm_tui.store.lock_holder import write_lock_holder

        holder = write_lock_holder(path)
        if holder is not None:
            return UserError(f"database {path}: locked by another process: {holder.said()}")
        return UserError(f"database {path}: locked by another process (try again, or check "
                         "for a stuck swarm-tui)")
    if "not a database" in msg or "malformed" in msg or "corrupt" in msg:
        return UserError(f"database {path}: not a swarm-tui database or corrupt ({exc})")
    if "readonly" in msg or "read-only" in msg or "unable to open" in msg or "permission" in msg:
        return UserError(f"database {path}: cannot write here ({exc}); pass --db or set "
                         "SWARM_TUI_DB to a writable path")
    if "disk" in msg and "full" in msg:
        return UserError(f"database {path}: disk full")
    return UserError(f"database {path}: {exc}")
