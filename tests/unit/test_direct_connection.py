"""store/direct.py answers the StoreConnection protocol as aiosqlite does: the same rows,
row counts and errors for every call the store makes, on the caller's thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from swarm_tui.store.direct import connect


async def _session(conn: Any) -> list[Any]:
    out: list[Any] = []
    await conn.executescript("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT);"
                             "CREATE TABLE u (x INTEGER)")
    await conn.executemany("INSERT INTO t (v) VALUES (?)", [("a",), ("b",), ("c",), ("하",)])
    async with conn.execute("UPDATE t SET v = v || '!' WHERE k >= ?", (2,)) as cur:
        out.append(cur.rowcount)
    cur = await conn.execute("SELECT k, v FROM t ORDER BY k")
    out.append(await cur.fetchone())
    out.append(list(await cur.fetchmany(2)))
    out.append(list(await cur.fetchall()))
    await cur.close()
    async with conn.execute("SELECT v FROM t WHERE v LIKE :p", {"p": "%!"}) as cur:
        out.append([row async for row in cur])
    await conn.commit()
    for bad in ("SELEC 1", "INSERT INTO t (k, v) VALUES (1, 'dup')"):
        try:
            await conn.execute(bad)
        except sqlite3.Error as e:
            out.append(type(e).__name__)
    await conn.close()
    return out


def test_the_same_answers_as_aiosqlite(tmp_path: Path):
    async def both() -> tuple[list[Any], list[Any]]:
        threads = threading.active_count()
        direct = await _session(connect(tmp_path / "d.db", 5.0))
        assert threading.active_count() == threads  # no thread of its own
        theirs = await _session(await aiosqlite.connect(tmp_path / "a.db", isolation_level=None))
        return direct, theirs

    direct, theirs = asyncio.run(both())
    assert direct == theirs
    assert direct[0] == 3 and direct[-2:] == ["OperationalError", "IntegrityError"]


def test_a_statement_runs_when_awaited_not_when_built(tmp_path: Path):
    async def go() -> None:
        conn = connect(tmp_path / "d.db", 5.0)
        pending = conn.execute("CREATE TABLE t (x)")
        with pytest.raises(sqlite3.OperationalError):
            await conn.execute("SELECT x FROM t")
        await pending
        assert list(await (await conn.execute("SELECT x FROM t")).fetchall()) == []
        await conn.close()

    asyncio.run(go())
