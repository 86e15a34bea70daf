"""The control queue: commands another process leaves for a running swarm, and who sent them."""

from __future__ import annotations

import getpass
import time

from swarm_tui.store.conn import StoreConnection


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
    """The runner's writer polls these every 0.5 s and marks them done."""
    await conn.execute(
        "INSERT INTO control (run_id, at, actor, command, arg) VALUES (?,?,?,?,?)",
        (run_id, time.time(), actor_on(conn, os_user()), command, arg))
