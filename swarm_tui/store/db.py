"""Opening the database: location, pragmas, migrations, and one-line errors for bad files."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

from swarm_tui.errors import UserError
from swarm_tui.paths import default_db_path
from swarm_tui.store.conn import BUSY_TIMEOUT_MS, StoreConnection
from swarm_tui.store.own_files import is_own_file, open_own, own_dir
from swarm_tui.store.schema import MIGRATIONS, SCHEMA_VERSION
from swarm_tui.store.scrub import run_data_step
from swarm_tui.store.target import DbTarget, PgTarget, db_error, is_pg_url


def resolve_db_target(cli_path: str | None, flag: str = "--db") -> DbTarget:
    """--db, else SWARM_TUI_DB, else the per-user file; a postgresql:// URL names a server."""
    raw = cli_path or os.environ.get("SWARM_TUI_DB")
    if raw and is_pg_url(raw):
        target = PgTarget(raw)
        if cli_path and target.has_password:
            raise UserError(f"{flag} {target}: a password on the command line is visible to "
                            "every user of this host; put it in PGPASSWORD, ~/.pgpass or a "
                            "service file (PGSERVICE), or the URL in SWARM_TUI_DB")
        return target
    return Path(raw).expanduser() if raw else default_db_path()


def _check_companions(path: Path) -> None:
    """SQLite writes `-wal` and `-shm` files beside the database (and `-journal` while it
    migrates): in a folder others can write (`/tmp/runs.db`, a team folder) another user
    can put a link there first — SQLite refused it as "unable to open database file",
    which named neither the file nor why — or a file of theirs, which SQLite would use
    and they could read and rewrite. Either is one line naming it, nothing opened."""
    for suffix in ("-wal", "-shm", "-journal"):
        companion = path.with_name(path.name + suffix)
        try:
            st = os.lstat(companion)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise UserError(f"database {path}: {companion}: cannot check it "
                            f"({e.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            why = "is a link — not followed (it would make SQLite write where it points)"
        elif not is_own_file(st):
            why = "is not a file of this user's alone — not used"
        else:
            continue
        raise UserError(f"database {path}: {companion} {why}; remove it, or keep the "
                        "database in a folder of your own")


def _validate(path: Path, create: bool) -> bool:
    """Check the file before aiosqlite or any pragma touches it; True if we created it.

    Synchronous on purpose: an aiosqlite connect that fails leaves its worker thread to
    report on a closed loop (a thread traceback after the one-line error). Nothing here
    writes: a foreign, newer or corrupt file is left byte-for-byte as it was.
    """
    if path.is_dir():
        raise UserError(f"database {path}: is a directory; pass --db with a file path")
    created = False
    if not path.exists():
        if not create:
            raise UserError(f"database {path}: does not exist (no runs recorded yet)")
        try:
            if not path.parent.exists():
                path.parent.mkdir(mode=0o700, parents=True)  # only the owner reads runs
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            created = True
        except FileExistsError:
            pass
        except OSError as e:
            raise UserError(f"database {path}: cannot create it ({e.strerror}); pass --db or "
                            "set SWARM_TUI_DB to a writable path") from None
    elif not os.access(path, os.R_OK):
        raise UserError(f"database {path}: cannot read it (permission denied)")
    _check_companions(path)
    try:
        raw = sqlite3.connect(f"file:{quote(str(path))}?mode=rw", uri=True,
                              timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except sqlite3.Error as e:
        raise db_error(path, e) from None
    try:
        version = raw.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise UserError(f"database {path}: schema version {version} is newer than this "
                            f"swarm-tui understands ({SCHEMA_VERSION}); upgrade swarm-tui")
        mode = raw.execute("PRAGMA journal_mode").fetchone()[0]
        if not created and (mode != "wal" or version < SCHEMA_VERSION):
            # about to change the header or migrate: be sure the pages are sound first
            check = raw.execute("PRAGMA quick_check(1)").fetchone()[0]
            if check != "ok":
                detail = " ".join(check.replace("*** in database main ***", "").split())
                raise UserError(f"database {path}: corrupt ({detail}); nothing was changed")
        if version == 0 and not created:
            tables = raw.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables:
                raise UserError(f"database {path}: not a swarm-tui database (it has other "
                                "tables); nothing was changed")
    except sqlite3.Error as e:
        raise db_error(path, e) from None
    finally:
        raw.close()
    if not created:
        _warn_if_shared(path)
    return created


_warned: set[Path] = set()
WAL_KEEP_BYTES = 64 * 1024 * 1024  # what a checkpoint leaves of the WAL file


def _warn_if_shared(path: Path) -> None:
    """Prompts and answers are the operator's: say so when others can read the file."""
    with contextlib.suppress(OSError):
        if path.stat().st_mode & 0o077 and path not in _warned:
            _warned.add(path)
            print(f"swarm-tui: warning: database {path} is readable by other users "
                  f"(prompts, answers, audit log); run: chmod 600 '{path}'*", file=sys.stderr)


def _remove_new(path: Path) -> None:
    """A database we created but could not initialise (a full disk) leaves nothing behind."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(OSError):
            Path(str(path) + suffix).unlink()


@contextlib.asynccontextmanager
async def _migration_lock(path: Path, here: bool) -> AsyncIterator[None]:
    """One process migrates a database file at a time. Openers that read the old version
    together each ran the next step; the second failed on what the first had just
    committed (`table key_changes already exists`): a run and the `runs` typed beside it."""
    from swarm_tui.store.claims import lock_dir

    lock = lock_dir(path) / "schema.lock"
    try:  # this user's folder and file alone, as the run locks beside it
        fd = open_own(own_dir(lock.parent) / lock.name, os.O_CREAT | os.O_RDWR)
    except OSError as e:
        raise UserError(f"database {path}: its lock {lock}: {e.strerror}") from None
    try:
        if here:  # a store on this thread (store/direct.py) waits on it, as for its rows
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            import asyncio

            await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)  # a migration is short
        yield
    finally:
        os.close(fd)  # drops the lock


async def _migrate(conn: StoreConnection, version: int) -> None:
    if version == SCHEMA_VERSION:
        return
    # Each step and its version bump commit together, so a crash never half-migrates.
    for target in range(version + 1, SCHEMA_VERSION + 1):
        script = MIGRATIONS[target - 1]
        await conn.executescript(f"BEGIN IMMEDIATE;\n{script}")
        try:
            await run_data_step(conn, target)
            await conn.execute(f"PRAGMA user_version = {target}")
            await conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                await conn.execute("ROLLBACK")
            raise


async def open_db(path: DbTarget, *, create: bool = True, reconcile: bool = True,
                  direct: bool = False) -> StoreConnection:
    """Open (and create/migrate) the database. Raises UserError with one clear line.

    Then reconciles it (store/reconcile.py): journals of dead executors are imported and
    runs whose every task has a result are marked finished, before anything is sent.
    `direct`: a SQLite file's statements on this thread (store/direct.py), for a command
    that asks a few queries and ends; a server is reached the same way either way."""
    if isinstance(path, PgTarget):
        from swarm_tui.store.pg_schema import open_pg

        server = await open_pg(path, create=create)
        if reconcile and await server.may_write("runs"):  # not a read-only role's to do
            await _reconcile(server, path)
        return server
    created = _validate(path, create)
    conn: StoreConnection | None = None
    try:
        if direct:
            from swarm_tui.store.direct import connect

            conn = connect(path, BUSY_TIMEOUT_MS / 1000)
        else:
            import aiosqlite

            conn = await aiosqlite.connect(path, timeout=BUSY_TIMEOUT_MS / 1000,
                                           isolation_level=None)
        await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        async with conn.execute("PRAGMA user_version") as cur:
            version = (await cur.fetchone() or [0])[0]
        async with conn.execute("PRAGMA journal_mode") as cur:
            mode = (await cur.fetchone() or ["?"])[0]
        if mode != "wal":
            await conn.execute("PRAGMA journal_mode = WAL")
        await conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable at checkpoints
        await conn.execute("PRAGMA foreign_keys = ON")
        # a big run's task rows go in as one transaction (1,000,000 tasks: a 4.4 GB WAL);
        # without a limit the WAL keeps that size on disk until the last connection closes
        await conn.execute(f"PRAGMA journal_size_limit = {WAL_KEEP_BYTES}")
        if version < SCHEMA_VERSION:
            async with _migration_lock(path, direct):
                # another opener may have migrated while this one waited: read it again
                async with conn.execute("PRAGMA user_version") as cur:
                    version = (await cur.fetchone() or [0])[0]
                await _migrate(conn, version)
        if reconcile:
            await _reconcile(conn, path)
        return conn
    except BaseException as e:
        if conn is not None:
            await conn.close()
        if created:
            _remove_new(path)
        if isinstance(e, sqlite3.Error | OSError):
            raise db_error(path, e) from None
        raise


async def _reconcile(conn: StoreConnection, path: DbTarget) -> None:
    from swarm_tui.store.spill import find_journals

    # the common case, nothing to put right, without importing what would put it right
    async with conn.execute("SELECT 1 FROM runs WHERE status = 'running' LIMIT 1") as cur:
        if await cur.fetchone() is None and not find_journals(path):
            return
    from swarm_tui.store.reconcile import reconcile_runs

    for warning in await reconcile_runs(conn, path):
        print(f"swarm-tui: warning: {warning}", file=sys.stderr)
