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


async def queue_command(conn: StoreConnection, run_id: str, command: str,
                        arg: str | None) -> None:
    """The runner's writer polls these every 0.5 s and marks them done."""
    await conn.execute(
        "INSERT INTO control (run_id, at, actor, command, arg) VALUES (?,?,?,?,?)",
        (run_id, time.time(), os_user(), command, arg))
