"""A finished run's cost breakdown (store/cost_rows.py's groups), stored whole beside its
rows: summing them is a GROUP BY that sorts every succeeded task — 150 ms of every
`report` and `cost` of a 100,000-task run — for figures that no longer change once the
run has ended. Taken only while it is still that run's: the same end, the same number of
results, the same span cut into the same steps (a resume ends it again and adds rows, so
the stored one no longer matches and is summed anew). The groups go through JSON, whose
floats read back bit for bit: the figures are the query's own.

Writing it is a convenience, never a duty (as store/replay_index.py): a read-only role, a
database another user owns, a lock held too long — the report sums the rows."""

from __future__ import annotations

import json
import sqlite3
import time

from swarm_tui.core.plain import build, to_json
from swarm_tui.store.conn import StoreConnection, upsert
from swarm_tui.store.cost_rows import CostGroup

_KEEP = upsert("cost_index", "run_id, finished_at, results, wall_ms, steps, built_at, data",
               "run_id")


async def _results(conn: StoreConnection, run_id: str) -> int:
    async with conn.execute("SELECT COUNT(*) FROM results WHERE run_id=?", (run_id,)) as cur:
        row = await cur.fetchone()
    return int(row[0])


async def read(conn: StoreConnection, run_id: str, finished_at: float, wall_ms: float,
               steps: int) -> list[CostGroup] | None:
    """The stored groups of the run as it ended at `finished_at`, cut into `steps` of
    `wall_ms`; None when there are none, or they were summed before the run changed."""
    try:
        async with conn.execute("SELECT finished_at, results, wall_ms, steps, data FROM "
                                "cost_index WHERE run_id=?", (run_id,)) as cur:
            row = await cur.fetchone()
        if row is None or (row[0], row[2], int(row[3])) != (finished_at, wall_ms, steps):
            return None
        if int(row[1]) != await _results(conn, run_id):
            return None
        return [build(CostGroup, group) for group in json.loads(row[4])]
    except (sqlite3.Error, ValueError, TypeError, AttributeError):
        return None  # a role that may not read it, a row of another layout: the rows are there


async def write(conn: StoreConnection, run_id: str, finished_at: float, wall_ms: float,
                steps: int, groups: list[CostGroup]) -> bool:
    """Keep the run's groups (replacing older ones); False when this connection may not."""
    may_write = getattr(conn, "may_write", None)  # PostgreSQL: a read-only role may not
    try:
        if may_write is not None and not await may_write("cost_index"):
            return False
        await conn.execute(_KEEP, (run_id, finished_at, await _results(conn, run_id),
                                   wall_ms, steps, time.time(), to_json(groups)))
    except sqlite3.Error:
        return False
    return True
