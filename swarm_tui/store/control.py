"""The control queue: commands another process leaves for a running swarm, and who sent them."""

from __future__ import annotations

import getpass
import time

from swarm_tui.store.audited import QUEUE, on_server
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.notify import CONTROL, notify


def os_user() -> str:
    """Who acted, for the control queue and the canary's audit log."""
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
