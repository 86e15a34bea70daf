"""aio.run_here: a brief command's coroutine run to its end with no event loop (issue 34)."""

from __future__ import annotations

import asyncio

import pytest

from swarm_tui.aio import NeedsLoop, run_here
from swarm_tui.store.direct import connect


async def _rows(path) -> list[tuple[int, str]]:
    conn = connect(path, 1.0)
    try:
        await conn.execute("CREATE TABLE t (n INTEGER, s TEXT)")
        await conn.executemany("INSERT INTO t VALUES (?, ?)", [(1, "a"), (2, "b")])
        async with conn.execute("SELECT n, s FROM t ORDER BY n") as cur:
            return list(await cur.fetchall())
    finally:
        await conn.close()


def test_a_store_on_this_thread_answers_without_a_loop(tmp_path):
    assert run_here(_rows(tmp_path / "x.db")) == [(1, "a"), (2, "b")]


def test_an_error_inside_unwinds_its_finally_blocks():
    closed = []

    async def failing() -> None:
        try:
            raise ValueError("bad row")
        finally:
            closed.append(True)

    with pytest.raises(ValueError, match="bad row"):
        run_here(failing())
    assert closed == [True]


def test_a_coroutine_that_waits_is_closed_and_named():
    closed = []

    async def waits() -> None:
        try:
            await asyncio.sleep(0)  # a bare yield: what a loop would have to resume
        finally:
            closed.append(True)

    with pytest.raises(NeedsLoop, match="waits"):
        run_here(waits())
    assert closed == [True]
