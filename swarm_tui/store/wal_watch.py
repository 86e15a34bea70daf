"""A SQLite WAL that cannot shrink, said once per doubling, with the readers that hold it.

The WAL is checkpointed into the database as the run writes and reused from its start
(`journal_size_limit` keeps the file at 64 MiB) — unless a reader holds a read transaction
open: an `sqlite3` shell left in BEGIN, a database browser, a process stopped in the middle
of a read. Then no checkpoint gets past what it reads and the WAL grows with every commit
(178 MiB for a 30,000-task run against 25 MiB; a 100,000-task run's would fill a small
disk, which stops the run). Nothing said so.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.lock_holder import LockHolder, wal_readers

CHECK_S = 5.0  # how often the WAL's size is looked at (one stat; a checkpoint only past it)
CONFIRM_S = 1.0  # a checkpoint cut short is tried once more: a read of our own lasts ms


class WalWatch:
    def __init__(self, db: Path, warn_bytes: int) -> None:
        self.db = db
        self.warn_at = warn_bytes
        self._next_check = 0.0
        self._cut_short = False  # the last checkpoint could not take the whole WAL

    async def check(self, conn: StoreConnection, now: float) -> str | None:
        """One line when the WAL is past the mark, twice running a checkpoint could not
        take it all, and another process is inside a read (where /proc/locks says: this
        run's own reads of task bodies cut a checkpoint short too, for milliseconds)."""
        if now < self._next_check:
            return None
        self._next_check = now + CHECK_S
        try:
            size = os.path.getsize(f"{self.db}-wal")
        except OSError:
            return None
        if size < self.warn_at:
            self._cut_short = False
            return None
        try:  # PASSIVE: as far as the readers allow, waiting on no one
            async with conn.execute("PRAGMA wal_checkpoint(PASSIVE)") as cur:
                row = await cur.fetchone()
        except sqlite3.Error:
            return None
        if row is None or row[1] <= 0 or row[2] >= row[1]:
            self._cut_short = False
            return None  # all of it checkpointed: a burst; the file is reused from its start
        if not self._cut_short:
            self._cut_short = True
            self._next_check = now + CONFIRM_S
            return None
        self._cut_short = False
        readers = wal_readers(self.db)
        if readers == []:  # only this process's own reads (a task body's, ms long)
            return None
        self.warn_at = 2 * size  # said again only if it doubles
        return (f"store: the WAL of {self.db} is {size >> 20} MiB and cannot shrink "
                f"{_held_by(readers)}; it grows with every write until that read ends")


def _held_by(readers: list[LockHolder] | None) -> str:
    if not readers:  # a system with no /proc/locks
        return "while a reader holds a read open (an sqlite3 shell inside BEGIN, a browser)"
    who = " and ".join(r.who() + (f", stopped (kill -CONT {r.pid})," if r.stopped else "")
                       for r in readers)
    return f"while {who} {'holds' if len(readers) == 1 else 'hold'} a read open"
