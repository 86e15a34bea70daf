"""SQLite on the caller's own thread, for the commands that ask a few queries and end
(`runs`, `report`, `cost`, `export`, `keys`, `canary`).

aiosqlite runs each statement on a thread of its own and wakes the event loop with the
answer: a thread to start, then two switches per statement (~0.3 ms each here) — what a
console or a run needs, so their loop never waits on a disk, and what a one-shot command
with nothing else on its loop only pays for (issue 34: start in ≤ 5× `python -c pass`).
The same StoreConnection protocol (store/conn.py): the store's code cannot tell them apart.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Generator, Iterable
from pathlib import Path
from typing import Any


class DirectCursor:
    def __init__(self, cur: sqlite3.Cursor) -> None:
        self._cur = cur

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount

    async def fetchone(self) -> Any:
        return self._cur.fetchone()

    async def fetchall(self) -> Iterable[Any]:
        return self._cur.fetchall()

    async def fetchmany(self, size: int) -> Iterable[Any]:
        return self._cur.fetchmany(size)

    async def __aiter__(self) -> AsyncIterator[Any]:
        for row in self._cur:
            yield row

    async def close(self) -> None:
        self._cur.close()


class DirectExecution:
    """A statement run when awaited (or entered), as aiosqlite's are."""

    def __init__(self, run: Callable[[], sqlite3.Cursor]) -> None:
        self._run = run
        self._cursor: DirectCursor | None = None

    async def _start(self) -> DirectCursor:
        self._cursor = DirectCursor(self._run())
        return self._cursor

    def __await__(self) -> Generator[Any, None, DirectCursor]:
        return self._start().__await__()

    async def __aenter__(self) -> DirectCursor:
        return await self._start()

    async def __aexit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        if self._cursor is not None:
            await self._cursor.close()


class DirectConnection:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, parameters: Iterable[Any] | None = None) -> DirectExecution:
        params = () if parameters is None else parameters
        return DirectExecution(lambda: self._conn.execute(sql, params))  # type: ignore[arg-type]

    def executemany(self, sql: str, parameters: Iterable[Iterable[Any]]) -> DirectExecution:
        return DirectExecution(lambda: self._conn.executemany(sql, parameters))  # type: ignore[arg-type]

    def executescript(self, sql_script: str) -> DirectExecution:
        return DirectExecution(lambda: self._conn.executescript(sql_script))

    async def commit(self) -> None:
        self._conn.commit()

    async def close(self) -> None:
        self._conn.close()


def connect(path: Path, timeout_s: float) -> DirectConnection:
    """Autocommit, as the store's aiosqlite connections are (isolation_level=None)."""
    return DirectConnection(sqlite3.connect(path, timeout=timeout_s, isolation_level=None))
