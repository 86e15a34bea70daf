"""Opening the database: location, pragmas, migrations, and one-line errors for bad files."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import aiosqlite
import platformdirs

from swarm_tui.errors import UserError
from swarm_tui.store.schema import MIGRATIONS, SCHEMA_VERSION

BUSY_TIMEOUT_MS = 5000


def default_db_path() -> Path:
    return platformdirs.user_data_path("swarm-tui") / "runs.db"


def resolve_db_path(cli_path: str | None) -> Path:
    raw = cli_path or os.environ.get("SWARM_TUI_DB")
    return Path(raw).expanduser() if raw else default_db_path()


def db_error(path: Path, exc: BaseException) -> UserError:
    """Map sqlite's errors to one line that names the file and what to do."""
    msg = str(exc).lower()
    if "locked" in msg or "busy" in msg:
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


async def _schema_version(conn: aiosqlite.Connection, path: Path) -> int:
    async with conn.execute("PRAGMA user_version") as cur:
        row = await cur.fetchone()
    version = row[0] if row else 0
    if version > SCHEMA_VERSION:
        raise UserError(f"database {path}: schema version {version} is newer than this "
                        f"swarm-tui understands ({SCHEMA_VERSION}); upgrade swarm-tui")
    return version


async def _migrate(conn: aiosqlite.Connection, version: int) -> None:
    if version == SCHEMA_VERSION:
        return
    # Each step and its version bump commit together, so a crash never half-migrates.
    for target in range(version + 1, SCHEMA_VERSION + 1):
        script = MIGRATIONS[target - 1]
        await conn.executescript(f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {target};\n"
                                 "COMMIT;")


async def open_db(path: Path, *, create: bool = True) -> aiosqlite.Connection:
    """Open (and create/migrate) the database. Raises UserError with one clear line."""
    if not create and not path.exists():
        raise UserError(f"database {path}: does not exist (no runs recorded yet)")
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"database {path}: cannot create its directory ({e.strerror})"
                            ) from None
    conn: aiosqlite.Connection | None = None
    try:
        conn = await aiosqlite.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Read the version before anything writes: a newer or foreign file stays untouched.
        version = await _schema_version(conn, path)
        async with conn.execute("PRAGMA journal_mode") as cur:
            mode = (await cur.fetchone() or ["?"])[0]
        if mode != "wal":
            await conn.execute("PRAGMA journal_mode = WAL")
        await conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable at checkpoints
        await conn.execute("PRAGMA foreign_keys = ON")
        await _migrate(conn, version)
        return conn
    except UserError:
        if conn is not None:
            await conn.close()
        raise
    except (sqlite3.Error, OSError) as e:
        if conn is not None:
            await conn.close()
        raise db_error(path, e) from None
