"""Reconcile on open: what a dead executor left behind is put right before anything is sent.

- a spill journal (results a full disk or an I/O error kept out of the database) is
  imported, so `resume` never re-sends a task that was answered;
- a run whose every task has a result but whose status was never written (killed after
  its last flush) is marked finished.
Both act for the run as its executor would, so they hold its lock while they do it, and
only when its owner is verifiably gone (store/claims.py).
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from swarm_tui.core.states import RunStatus
from swarm_tui.errors import UserError
from swarm_tui.store.claims import take_lock
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.lost_sends import supersede_lost
from swarm_tui.store.runs import RunRecord, get_run, unsummed_wall_ms
from swarm_tui.store.spill import find_journals, read_journal
from swarm_tui.store.target import DbTarget
from swarm_tui.store.writer import ATTEMPT_FIELDS, SQL_BY_TABLE, TABLE_ORDER


async def reconcile_runs(conn: StoreConnection, path: DbTarget) -> list[str]:
    """Returns warnings (one line each) about what could not be put right."""
    journals = find_journals(path)
    async with conn.execute("SELECT id FROM runs WHERE status = 'running'") as cur:
        running = [r[0] for r in await cur.fetchall()]
    warnings: list[str] = []
    for run_id in sorted(set(running) | set(journals)):
        try:
            run = await get_run(conn, run_id, path)
        except UserError:
            warnings.append(f"journal {journals[run_id][0]}: no run {run_id} in {path}; left "
                            "as it is")
            continue
        if run.status == RunStatus.RUNNING and run.owner_alive():
            continue
        try:
            claim = take_lock(path, run_id, wait_s=0.0)
        except UserError:
            continue  # someone is resuming it right now: theirs to do
        try:
            run = await get_run(conn, run_id, path)
            if run.status == RunStatus.RUNNING and run.host != claim.host and run.owner_alive():
                continue
            for journal in journals.get(run_id, []):
                warning = await _import(conn, run, journal)
                if warning:
                    warnings.append(warning)
            if run.status == RunStatus.RUNNING and await _all_answered(conn, run_id):
                # it ended at its last heartbeat (not when this reader came by, maybe days
                # later: a replay's end), and that session's time joins the run's wall
                await conn.execute(
                    "UPDATE runs SET status='finished', finished_at=?, owner_token=NULL, "
                    "wall_ms = wall_ms + ? WHERE id=? AND owner_token IS ?",
                    (run.heartbeat_at, await unsummed_wall_ms(conn, run), run_id,
                     run.owner_token))
        except sqlite3.Error as e:
            warnings.append(f"run {run_id}: could not reconcile ({e})")
        finally:
            claim.release()
    return warnings


async def import_worker_journals(conn: StoreConnection, path: DbTarget,
                                 run_id: str) -> list[str]:
    """After a run's workers have all exited (`run --workers`): what any of them journaled
    (a store that failed past its grace, a lease lost while stopped) goes into the store
    before the run's summary is read. Warnings for what could not be imported yet."""
    run = await get_run(conn, run_id, path)
    warnings = []
    for journal in find_journals(path).get(run_id, []):
        warning = await _import(conn, run, journal)
        if warning:
            warnings.append(warning)
    return warnings


async def _import(conn: StoreConnection, run: RunRecord, journal: Path) -> str | None:
    """Write a journal's rows (idempotent: attempts by uid, first result wins), then
    remove it. On failure the journal stays for the next open."""
    entries = read_journal(journal)
    if entries:
        await conn.execute("BEGIN IMMEDIATE")
        try:
            for table in TABLE_ORDER:
                rows = [tuple(r) for t, r in entries if t == table]
                if table == "attempt":  # an answer booked lost meanwhile is found after all
                    # (a journal an older version wrote has no retry_detail)
                    rows = [r + (None,) * (ATTEMPT_FIELDS - len(r)) for r in rows]
                    await supersede_lost(conn, rows)
                if rows:
                    await conn.executemany(SQL_BY_TABLE[table], rows)
            await conn.execute("COMMIT")
        except sqlite3.Error as e:
            with contextlib.suppress(sqlite3.Error):
                await conn.execute("ROLLBACK")
            return (f"run {run.id}: {len(entries)} unsaved results in journal {journal} "
                    f"could not be imported yet ({e}); they are kept")
    with contextlib.suppress(OSError):
        journal.unlink()
    return None


async def _all_answered(conn: StoreConnection, run_id: str) -> bool:
    async with conn.execute(
            "SELECT count(*) FROM tasks t LEFT JOIN results r ON r.run_id = t.run_id "
            "AND r.seq = t.seq WHERE t.run_id = ? AND (r.state IS NULL OR "
            "r.state = 'cancelled')", (run_id,)) as cur:
        row = await cur.fetchone()
    return row is not None and row[0] == 0
