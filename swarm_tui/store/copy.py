"""`swarm-tui db copy SRC DST`: stored runs moved between databases (a laptop's SQLite file
into the team's PostgreSQL, or back), each run in one transaction of the destination.

A run already in the destination is skipped (a copy can be repeated); a run still being
executed is skipped too (its rows are still arriving). Row ids (attempts, events,
control) are the destination's own; an attempt keeps its uid, so nothing is told twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from swarm_tui.core.states import RunStatus
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.runs import list_runs

CHUNK = 2_000
# table -> (its columns without the row id, the order its rows are read in)
RUN_TABLES: dict[str, tuple[str, str]] = {
    "runs": ("id, name, status, simulated, started_at, finished_at, heartbeat_at, pid, host, "
             "wall_ms, total, workload_hash, config_json, summary_json, owner_token, "
             "owner_started, lock_path, live_json", "id"),
    "tasks": ("run_id, seq, task_id, task_json, model, gateway, bucket", "seq"),
    "attempts": ("uid, run_id, seq, number, model, gateway, key_fp, sent_at, queue_ms, "
                 "latency_ms, ttft_ms, status_code, error_class, error_message, retry_wait_s, "
                 "tokens_in, tokens_out, cached_in, outcome, retry_detail", "id"),
    "results": ("run_id, seq, state, model, gateway, bucket, key_fp, attempts, tokens_in, "
                "tokens_out, cached_in, usage_estimated, cost_usd, latency_ms, ttft_ms, "
                "queue_ms, status_code, error_class, error_message, response_text, "
                "finished_at", "seq"),
    "events": ("run_id, at, kind, actor, detail_json", "id"),
    "control": ("run_id, at, actor, command, arg, done_at", "id"),
    "key_state": ("run_id, gateway, fingerprint, worker, label, source, state, cooling_until, "
                  "reason, in_flight, calls, rate_limited, errors, tokens_in, tokens_out, "
                  "last_used, updated_at", "gateway, fingerprint, worker"),
    "key_changes": ("run_id, at, gateway, fingerprint, worker, label, source, state, "
                    "cooling_until, reason", "at"),
    "batches": ("run_id, batch, first_seq, last_seq, worker, token, expires_at, leases, "
                "done_at", "batch"),
    "workers": ("run_id, worker, token, host, pid, started_at, heartbeat_at, ended_at, "
                "live_json, granted_usd, spent_usd", "worker"),
    # the run's stored replay timeline: still its own in the destination (the same end and
    # rows), so the first replay there reads it instead of building it
    "replay_index": ("run_id, finished_at, results, attempts, events, built_at, data",
                     "run_id"),
    # and its cost breakdown, summed at its end
    "cost_index": ("run_id, finished_at, results, wall_ms, steps, built_at, data", "run_id"),
}


@dataclass
class CopyReport:
    copied: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    rows: int = 0


async def _exists(conn: StoreConnection, run_id: str) -> bool:
    async with conn.execute("SELECT 1 FROM runs WHERE id=?", (run_id,)) as cur:
        return await cur.fetchone() is not None


async def _copy_run(src: StoreConnection, dst: StoreConnection, run_id: str) -> int:
    rows = 0
    await dst.execute("BEGIN IMMEDIATE")
    try:
        for table, (cols, order) in RUN_TABLES.items():
            key = "id" if table == "runs" else "run_id"
            marks = ", ".join("?" * len(cols.split(", ")))
            insert = f"INSERT INTO {table} ({cols}) VALUES ({marks})"
            async with src.execute(f"SELECT {cols} FROM {table} WHERE {key}=? ORDER BY {order}",
                                   (run_id,)) as cur:
                while chunk := list(await cur.fetchmany(CHUNK)):
                    await dst.executemany(insert, [tuple(r) for r in chunk])
                    rows += len(chunk)
        await dst.execute("COMMIT")
    except BaseException:
        await dst.execute("ROLLBACK")
        raise
    return rows


async def copy_runs(src: StoreConnection, dst: StoreConnection,
                    run_ids: list[str] | None = None) -> CopyReport:
    """Every finished, cancelled or interrupted run of `src` (or those named) into `dst`."""
    report = CopyReport()
    records = [r for r in await list_runs(src, limit=10**9)
               if run_ids is None or r.id in run_ids]
    for record in sorted(records, key=lambda r: r.started_at):
        if record.effective_status() == RunStatus.RUNNING:
            report.running.append(record.id)
        elif await _exists(dst, record.id):
            report.present.append(record.id)
        else:
            report.rows += await _copy_run(src, dst, record.id)
            report.copied.append(record.id)
    return report
