"""A PostgreSQL database brought to the current schema: the same migrations as SQLite's,
in PostgreSQL's types (store/pg.py: translate_ddl), versioned in `swarm_tui_schema`."""

from __future__ import annotations

from swarm_tui.errors import UserError
from swarm_tui.store.pg import PgConnection, PgError, translate_ddl
from swarm_tui.store.schema import MIGRATIONS, SCHEMA_VERSION
from swarm_tui.store.scrub import run_data_step
from swarm_tui.store.target import PgTarget

MIGRATION_LOCK = 0x5357_4D54  # pg_advisory_xact_lock key: one migrator at a time


async def _version(conn: PgConnection) -> int | None:
    async with conn.execute("SELECT to_regclass('swarm_tui_schema') IS NOT NULL") as cur:
        row = await cur.fetchone()
    if not row or not row[0]:
        return None
    async with conn.execute("SELECT version FROM swarm_tui_schema") as cur:
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def _migrate(conn: PgConnection, target: PgTarget) -> None:
    """Each step and its version bump commit together; concurrent openers queue on a
    transaction-scoped advisory lock and find the work done."""
    await conn.execute("BEGIN")
    try:
        await conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
        version = await _version(conn)
        if version is None:
            async with conn.execute("SELECT to_regclass('runs') IS NOT NULL") as cur:
                foreign = (await cur.fetchone() or [False])[0]
            if foreign:
                raise UserError(f"database {target}: not a swarm-tui database (it has a "
                                "`runs` table of its own); nothing was changed")
            await conn.executescript("CREATE TABLE swarm_tui_schema (version INTEGER NOT NULL);"
                                     "INSERT INTO swarm_tui_schema VALUES (0)")
            version = 0
        for step in range(version + 1, SCHEMA_VERSION + 1):
            await conn.executescript(translate_ddl(MIGRATIONS[step - 1]))
            await run_data_step(conn, step)
            await conn.execute("UPDATE swarm_tui_schema SET version = ?", (step,))
        await conn.execute("COMMIT")
    except BaseException:
        await conn.execute("ROLLBACK")
        raise


async def open_pg(target: PgTarget, *, create: bool) -> PgConnection:
    from swarm_tui.store.target import db_error

    try:
        conn = await PgConnection.connect(target)
    except PgError as e:
        raise db_error(target, e) from None
    try:
        version = await _version(conn)
        if version is not None and version > SCHEMA_VERSION:
            raise UserError(f"database {target}: schema version {version} is newer than this "
                            f"swarm-tui understands ({SCHEMA_VERSION}); upgrade swarm-tui")
        if version is None and not create:
            raise UserError(f"database {target}: no swarm-tui schema yet (no runs recorded)")
        if version is None or version < SCHEMA_VERSION:
            await _migrate(conn, target)
    except PgError as e:
        await conn.close()
        raise db_error(target, e) from None
    except BaseException:
        await conn.close()
        raise
    return conn
