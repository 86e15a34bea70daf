"""The stored runs as the console's history panel reads them — the list, two runs
compared — so the ui itself never opens the store (an import contract holds it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarm_tui.store.target import missing_file

if TYPE_CHECKING:
    from swarm_tui.report.listing import RunListItem
    from swarm_tui.store.target import DbTarget


def has_runs(db_target: DbTarget | None) -> bool:
    """Whether there is a store to read runs from (a named file that is missing: none)."""
    return db_target is not None and not missing_file(db_target)


async def listing(db_target: DbTarget, limit: int = 200) -> list[RunListItem]:
    from swarm_tui.report.listing import runs_listing
    from swarm_tui.store.db import open_db

    conn = await open_db(db_target, create=False)
    try:
        return await runs_listing(conn, limit)
    finally:
        await conn.close()


async def compare_text(db_target: DbTarget, a: str, b: str) -> str:
    """Run A (before) against run B (after), as `report A --compare B` prints it."""
    from swarm_tui.report.history import compare_table, run_summary
    from swarm_tui.store.db import open_db
    from swarm_tui.store.runs import get_run

    conn = await open_db(db_target, create=False)
    try:
        sa = await run_summary(conn, await get_run(conn, a, db_target))
        sb = await run_summary(conn, await get_run(conn, b, db_target))
    finally:
        await conn.close()
    return compare_table(sa, sb)
