"""The connection the store is written against: what aiosqlite's offers and store/pg.py's
mirrors. A Protocol, so the store names no driver and either back end type-checks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterable
from typing import Any, Protocol

BUSY_TIMEOUT_MS = 5000


class StoreCursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    async def fetchone(self) -> Any: ...

    async def fetchall(self) -> Iterable[Any]: ...

    async def fetchmany(self, size: int) -> Iterable[Any]: ...

    def __aiter__(self) -> AsyncIterator[Any]: ...

    async def close(self) -> None: ...


class Execution(Protocol):
    """A statement under way: awaited, the cursor; `async with`, the cursor closed after."""

    def __await__(self) -> Generator[Any, None, StoreCursor]: ...

    async def __aenter__(self) -> StoreCursor: ...

    async def __aexit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> Any: ...


class StoreConnection(Protocol):
    def execute(self, sql: str, parameters: Iterable[Any] | None = None) -> Execution: ...

    def executemany(self, sql: str, parameters: Iterable[Iterable[Any]]) -> Execution: ...

    def executescript(self, sql_script: str) -> Execution: ...

    async def commit(self) -> None: ...

    async def close(self) -> None: ...


def dialect_of(conn: StoreConnection) -> str:
    """"postgresql" for store/pg.py's connection (it names its dialect), else "sqlite"."""
    return str(getattr(conn, "dialect", "sqlite"))


def upsert(table: str, cols: str, key: str, where: str = "") -> str:
    """INSERT ... ON CONFLICT (key) DO UPDATE: spelled alike by SQLite and PostgreSQL."""
    names = cols.split(", ")
    keys = set(key.split(", "))
    sets = ", ".join(f"{c} = excluded.{c}" for c in names if c not in keys)
    return (f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(names))}) "
            f"ON CONFLICT ({key}) DO UPDATE SET {sets}{where}")
