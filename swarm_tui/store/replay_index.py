"""A finished run's replay timeline, stored whole beside its rows (issue 35: any moment of
a 100,000-task run on screen in a blink). replay/timeline.py builds and reads the blob;
here it is only a row: stored once the run has ended, and taken only while it is still
that run's — the same end, the same number of results, calls and events (a resume ends it again
and adds rows, so the stored one no longer matches and is built anew).

Writing it is a convenience, never a duty: a read-only role, a database another user
owns, a lock held too long — the replay goes on from the rows."""

from __future__ import annotations

import sqlite3
import time

from swarm_tui.store.conn import StoreConnection, upsert

_KEEP = upsert("replay_index", "run_id, finished_at, results, attempts, events, built_at, data",
               "run_id")


async def _counts(conn: StoreConnection, run_id: str) -> tuple[int, int, int]:
    """The run's results, calls and events: what its timeline is built from."""
    async with conn.execute("SELECT (SELECT COUNT(*) FROM results WHERE run_id=?), "
                            "(SELECT COUNT(*) FROM attempts WHERE run_id=?), "
                            "(SELECT COUNT(*) FROM events WHERE run_id=?)",
                            (run_id, run_id, run_id)) as cur:
        row = await cur.fetchone()
    return int(row[0]), int(row[1]), int(row[2])


async def read(conn: StoreConnection, run_id: str, finished_at: float) -> bytes | None:
    """The stored timeline of the run as it ended at `finished_at`; None when there is none
    or it was built before the run changed."""
    try:
        read = getattr(conn, "execute_binary", conn.execute)  # PostgreSQL: bytes as bytes
        async with read("SELECT finished_at, results, attempts, events, data FROM "
                        "replay_index WHERE run_id=?", (run_id,)) as cur:
            row = await cur.fetchone()
        if row is None or row[0] != finished_at:
            return None
        if (int(row[1]), int(row[2]), int(row[3])) != await _counts(conn, run_id):
            return None
        return bytes(row[4])
    except sqlite3.Error:
        return None  # e.g. a role that may not read it: the rows are there


async def write(conn: StoreConnection, run_id: str, finished_at: float, blob: bytes) -> bool:
    """Keep the run's timeline (replacing an older one); False when this connection may not."""
    may_write = getattr(conn, "may_write", None)  # PostgreSQL: a read-only role may not
    try:
        if may_write is not None and not await may_write("replay_index"):
            return False
        results, attempts, events = await _counts(conn, run_id)
        await conn.execute(_KEEP, (run_id, finished_at, results, attempts, events,
                                   time.time(), blob))
    except sqlite3.Error:
        return False
    return True
