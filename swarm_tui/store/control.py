"""The control queue: commands another process leaves for a running swarm, and who sent them."""

from __future__ import annotations

import time

from swarm_tui.store.audited import QUEUE, on_server
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.notify import CONTROL, notify


def os_user() -> str:
    """Who acted, for the control queue and the canary's audit log."""
    import getpass  # here: reading commands never ask (it brings termios)

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers): still say something
        return "unknown"


def actor_on(conn: StoreConnection, actor: str) -> str:
    """The OS user, and on a database server the role it connected as: "alice (db: ops)"."""
    db_user = getattr(conn, "db_user", None)  # store/pg.py's connection knows its role
    return f"{actor} (db: {db_user})" if db_user and actor != "auto" else actor


async def queue_command(conn: StoreConnection, run_id: str, command: str,
                        arg: str | None) -> None:
    """The runner's writer (each worker's) applies these: at once on PostgreSQL, told by
    a notification once the command is stored; within its 0.5 s poll otherwise."""
    if on_server(conn):  # audited by the server: the role is session_user, not ours to say
        await conn.execute(f"SELECT {QUEUE}(?, ?, ?, ?)", (run_id, command, arg, os_user()))
        return
    await conn.execute(
        "INSERT INTO control (run_id, at, actor, command, arg) VALUES (?,?,?,?,?)",
        (run_id, time.time(), actor_on(conn, os_user()), command, arg))
    await notify(conn, CONTROL, run_id)


async def last_command_id(conn: StoreConnection, run_id: str) -> int:
    """The newest command queued for the run (0: none): a worker applies what comes after."""
    async with conn.execute("SELECT COALESCE(MAX(id), 0) FROM control WHERE run_id=?",
                            (run_id,)) as cur:
        return int((await cur.fetchone())[0])


async def commands_after(conn: StoreConnection, run_id: str, after: int
                         ) -> list[tuple[int, str, str | None, str | None]]:
    """(id, command, arg, actor) queued after `after`, oldest first (workers: each applies
    every one, leaving it for the others)."""
    async with conn.execute("SELECT id, command, arg, actor FROM control WHERE run_id=? "
                            "AND id > ? ORDER BY id", (run_id, after)) as cur:
        return [tuple(r) for r in await cur.fetchall()]


async def commands_pending(conn: StoreConnection, run_id: str
                           ) -> list[tuple[int, str, str | None, str | None]]:
    """(id, command, arg, actor) not yet done, oldest first (a single executor)."""
    async with conn.execute("SELECT id, command, arg, actor FROM control WHERE run_id=? "
                            "AND done_at IS NULL ORDER BY id", (run_id,)) as cur:
        return [tuple(r) for r in await cur.fetchall()]


async def mark_done(conn: StoreConnection, command_id: int) -> None:
    await conn.execute("UPDATE control SET done_at=? WHERE id=?", (time.time(), command_id))
