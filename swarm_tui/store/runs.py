"""Runs in the store: create, look up, summarize, list, and what a resume must re-send."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from swarm_tui.core.plain import build, to_json
from swarm_tui.core.record import record
from swarm_tui.core.states import RunStatus
from swarm_tui.errors import UserError
from swarm_tui.store.claims import Claim, owner_alive, pid_alive
from swarm_tui.store.conn import BUSY_TIMEOUT_MS, StoreConnection, dialect_of
from swarm_tui.store.lost_sends import book_lost_sends
from swarm_tui.store.target import DbTarget

if TYPE_CHECKING:  # (imported where used: `runs` reads rows, not models — issue 34)
    from swarm_tui.core.records import TaskHead, TaskRecord
    from swarm_tui.core.summary import RunSummary
    from swarm_tui.settings.sections import SlaConfig
    from swarm_tui.workload import Task

ENDED = ("finished", "cancelled", "budget_stopped")


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + os.urandom(2).hex()


@record(slots=True)
class RunRecord:
    """A stored run's row."""

    id: str
    name: str | None
    status: str
    simulated: bool
    started_at: float
    finished_at: float | None
    heartbeat_at: float
    pid: int | None
    host: str | None
    wall_ms: float
    total: int
    workload_hash: str
    config: dict[str, Any]
    summary: dict[str, Any] | None
    owner_token: str | None = None
    owner_started: float | None = None
    lock_path: str | None = None

    def owner_alive(self, now: float | None = None) -> bool:
        return owner_alive(self.host, self.pid, self.owner_started, self.lock_path,
                           self.heartbeat_at, now)

    def effective_status(self, now: float | None = None) -> str:
        """`interrupted`: marked running, but its executor is verifiably gone (a stopped
        or busy executor still owns its run; see store/claims.py)."""
        if self.status == RunStatus.RUNNING and not self.owner_alive(now):
            return "interrupted"
        return self.status

    @property
    def sla(self) -> SlaConfig:
        from swarm_tui.settings.sections import SlaConfig

        # as the run stored it (validated when it started)
        return build(SlaConfig, self.config.get("settings", {}).get("sla") or {})


_RUN_COLS = ("id, name, status, simulated, started_at, finished_at, heartbeat_at, pid, host, "
             "wall_ms, total, workload_hash, config_json, summary_json, owner_token, "
             "owner_started, lock_path")


def _record(row: tuple) -> RunRecord:
    (rid, name, status, sim, started, finished, beat, pid, host, wall, total, wh, cfg,
     summary, token, owner_started, lock_path) = row
    return RunRecord(id=rid, name=name, status=status, simulated=bool(sim), started_at=started,
                     finished_at=finished, heartbeat_at=beat, pid=pid, host=host, wall_ms=wall,
                     total=total, workload_hash=wh, config=json.loads(cfg),
                     summary=json.loads(summary) if summary else None, owner_token=token,
                     owner_started=owner_started, lock_path=lock_path)


async def create_run(conn: StoreConnection, run_id: str, records: Sequence[TaskRecord],
                     tasks: Iterable[Task], *, name: str | None, simulated: bool,
                     config: dict[str, Any], claim: Claim) -> None:
    """The run and its task rows; `tasks` are the agents' whole tasks, in their order (a
    new pass over the workload: the agents hold no prompt)."""
    now = time.time()
    import hashlib  # OpenSSL's load is 2-3 ms of a reading command's start
    digest = hashlib.sha256()

    def rows() -> Iterator[tuple]:
        # a generator: 100,000 rows of ~3 KB of JSON never exist at once
        for a, task in zip(records, tasks, strict=True):
            if task.id != a.id:
                raise RuntimeError(f"workload changed while read: {task.id} != {a.id}")
            line = task.model_dump_json(exclude_none=True)
            digest.update(line.encode())
            digest.update(b"\n")
            yield run_id, a.seq, a.id, line, a.model, a.gateway, a.bucket

    # The task rows go in CREATE_CHUNK at a time, each its own transaction, the WAL
    # checkpointed between them: as one transaction a 100,000-task run took the WAL to
    # ~400 MB before its first call (`journal_size_limit` applies only after a checkpoint
    # completes). The run's workload_hash is written last: until then the run is one whose
    # creation did not finish — nothing was sent for it, and `resume` says so.
    chunks = _chunks(rows(), CREATE_CHUNK)
    first = next(chunks, [])
    await conn.execute("BEGIN IMMEDIATE")
    try:
        await conn.execute(
            f"INSERT INTO runs ({_RUN_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, name, "running", int(simulated), now, None, now, claim.pid,
             claim.host, 0.0, len(records), "", json.dumps(config),
             None, claim.token, claim.started, str(claim.lock_path)))
        await _insert_tasks(conn, first)
        await conn.execute("COMMIT")
        for chunk in chunks:
            await checkpoint_wal(conn)
            await conn.execute("BEGIN IMMEDIATE")
            await _insert_tasks(conn, chunk)
            await conn.execute("COMMIT")
        await conn.execute("UPDATE runs SET workload_hash=? WHERE id=?",
                           (digest.hexdigest()[:16], run_id))
        await refresh_stats(conn, "tasks")
    except BaseException:
        # SQLite rolls back by itself on a full disk; a second ROLLBACK would hide the cause
        with contextlib.suppress(sqlite3.Error):
            await conn.execute("ROLLBACK")
        with contextlib.suppress(sqlite3.Error):  # nothing was sent: no half-made run kept
            await conn.execute("DELETE FROM tasks WHERE run_id=?", (run_id,))
            await conn.execute("DELETE FROM runs WHERE id=?", (run_id,))
        raise


CREATE_CHUNK = 5_000  # task rows per transaction when a run is created


def _chunks(it: Iterator[tuple], size: int) -> Iterator[list[tuple]]:
    chunk: list[tuple] = []
    for row in it:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


async def _insert_tasks(conn: StoreConnection, rows: list[tuple]) -> None:
    if rows:
        await conn.executemany(
            "INSERT INTO tasks (run_id, seq, task_id, task_json, model, gateway, bucket) "
            "VALUES (?,?,?,?,?,?,?)", rows)


async def checkpoint_wal(conn: StoreConnection) -> None:
    """SQLite: write the WAL back into the database and truncate it, if no reader holds
    it right now (then the next call does: never waits more than a moment for them)."""
    if dialect_of(conn) == "postgresql":
        return
    with contextlib.suppress(sqlite3.Error):
        await conn.execute("PRAGMA busy_timeout = 50")
        try:
            await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")


async def refresh_stats(conn: StoreConnection, *tables: str) -> None:
    """PostgreSQL: ANALYZE after a bulk write. A new run's id is in no statistics yet, so
    the planner guesses one row for it and joins its 20,000 rows by nested loops: a report
    right after a run took 138 s instead of 0.2. (Autovacuum analyzes only after 10 % of a
    table changed.) Sampled, so ~0.1 s; a role that does not own the tables is skipped by
    the server with a notice. SQLite: nothing to do (its planner uses the indexes)."""
    if dialect_of(conn) != "postgresql":
        return
    with contextlib.suppress(sqlite3.Error):
        await conn.execute(f"ANALYZE {', '.join(tables)}")


LAST = "last"  # a RUN_ID argument meaning the newest stored run (run ids start with a date)


async def get_settled_run(conn: StoreConnection, run_id: str, path: DbTarget
                          ) -> tuple[RunRecord, str]:
    """The run and its effective status, read so that an executor ending right now is
    never taken for a dead one: it writes its final status before it lets go of its lock,
    so a row read *before* the lock was found free may be stale — read it again then (a
    watcher under load saw a finished run as `interrupted`)."""
    run = await get_run(conn, run_id, path)
    status = run.effective_status()
    if status == "interrupted":
        run = await get_run(conn, run.id, path)
        status = run.effective_status()
    return run, status


async def get_run(conn: StoreConnection, run_id: str, path: DbTarget) -> RunRecord:
    """A run by id, or the newest one for `last` (on call: `report last`, no `runs` first)."""
    if run_id == LAST:
        newest = await list_runs(conn, 1)
        if not newest:
            raise UserError(f"database {path}: no stored runs yet (`last` names the newest)")
        return newest[0]
    async with conn.execute(f"SELECT {_RUN_COLS} FROM runs WHERE id = ?", (run_id,)) as cur:
        row = await cur.fetchone()
    if row is None:
        raise UserError(f"run {run_id}: not found in {path} (see `swarm-tui runs`)")
    return _record(tuple(row))


async def list_runs(conn: StoreConnection, limit: int = 50) -> list[RunRecord]:
    async with conn.execute(
            f"SELECT {_RUN_COLS} FROM runs ORDER BY started_at DESC LIMIT ?", (limit,)) as cur:
        return [_record(tuple(r)) for r in await cur.fetchall()]


@record(slots=True)
class StoredTask:
    """A task row as the summary needs it (the engine's TaskRecord has the same attributes)."""

    state: str
    model: str
    gateway: str
    bucket: str
    latency_ms: float | None
    ttft_ms: float | None
    queue_ms: float
    tokens_in: int
    tokens_out: int
    cached_in: int
    usage_estimated: bool
    cost_usd: float | None
    error_class: str | None
    seq: int = 0          # the rest is for the console's grid and the cost report
    task_id: str = ""
    attempts: int = 0
    key_fp: str | None = None
    finished_at: float | None = None
    calls_ok: int = 0      # the task's answered calls, from its attempts (per-call success)
    calls_failed: int = 0

    # written out: one is built per stored row, and a record's shared __init__ is ~3x slower
    def __init__(self, state: str, model: str, gateway: str, bucket: str,
                 latency_ms: float | None, ttft_ms: float | None, queue_ms: float,
                 tokens_in: int, tokens_out: int, cached_in: int, usage_estimated: bool,
                 cost_usd: float | None, error_class: str | None, seq: int = 0,
                 task_id: str = "", attempts: int = 0, key_fp: str | None = None,
                 finished_at: float | None = None, calls_ok: int = 0,
                 calls_failed: int = 0) -> None:
        self.state = state
        self.model = model
        self.gateway = gateway
        self.bucket = bucket
        self.latency_ms = latency_ms
        self.ttft_ms = ttft_ms
        self.queue_ms = queue_ms
        self.tokens_in = tokens_in
        self.tokens_out = tokens_out
        self.cached_in = cached_in
        self.usage_estimated = usage_estimated
        self.cost_usd = cost_usd
        self.error_class = error_class
        self.seq = seq
        self.task_id = task_id
        self.attempts = attempts
        self.key_fp = key_fp
        self.finished_at = finished_at
        self.calls_ok = calls_ok
        self.calls_failed = calls_failed
    tasks: ClassVar[int] = 1  # as a cost row: one task


async def task_rows(conn: StoreConnection, run_id: str, chunk: int = 2000
                    ) -> AsyncIterator[list[StoredTask]]:
    """The run's result rows, a chunk at a time (a 100,000-task run is never in memory)."""
    # the attempts' counts in one grouped pass joined by seq, not two subqueries per row:
    # PostgreSQL right after a run (its statistics not yet refreshed) planned those as a
    # scan per row — 20 s for 20,000 tasks
    async with conn.execute(
            "SELECT state, model, gateway, bucket, latency_ms, ttft_ms, queue_ms, tokens_in, "
            "tokens_out, cached_in, usage_estimated, cost_usd, error_class, r.seq, task_id, "
            "attempts, key_fp, finished_at, COALESCE(a.ok, 0), COALESCE(a.failed, 0) "
            "FROM task_results r LEFT JOIN (SELECT seq, "
            "COUNT(CASE WHEN outcome = 'ok' THEN 1 END) AS ok, "
            "COUNT(CASE WHEN outcome = 'error' THEN 1 END) AS failed "
            "FROM attempts WHERE run_id = ? GROUP BY seq) a ON a.seq = r.seq "
            "WHERE r.run_id = ? ORDER BY r.seq", (run_id, run_id)) as cur:
        while rows := await cur.fetchmany(chunk):
            yield [StoredTask(*r) for r in rows]


async def tasks_sent_twice(conn: StoreConnection, run_id: str) -> set[int]:
    """Seqs of tasks answered more than once, whose attempt number repeats (two executors
    each sent it), or sent again after a send whose answer was lost with its executor."""
    async with conn.execute(
            "SELECT seq FROM attempts WHERE run_id = ? GROUP BY seq HAVING "
            "COUNT(CASE WHEN outcome = 'ok' THEN 1 END) > 1 OR COUNT(*) > COUNT(DISTINCT number)"
            " OR (COUNT(CASE WHEN outcome = 'lost' THEN 1 END) > 0 AND COUNT(*) > 1)",
            (run_id,)) as cur:
        return {r[0] for r in await cur.fetchall()}


async def save_summary(conn: StoreConnection, summary: RunSummary) -> None:
    await conn.execute("UPDATE runs SET summary_json=? WHERE id=?",
                       (to_json(summary), summary.run_id))


async def resumable_tasks(
    conn: StoreConnection, run_id: str, first: int = 0, last: int | None = None
) -> tuple[list[int], list[TaskHead], list[int]]:
    """Tasks with no stored result (never finished, or cancelled), with their stored
    attempts: heads only, read row by row (the prompts are read again at each send).
    `first`..`last`: one leased batch's seqs (store/leases.py)."""
    from swarm_tui.workload import Task

    seqs: list[int] = []
    heads: list[TaskHead] = []
    prior: list[int] = []
    async with conn.execute(
            "SELECT t.seq, t.task_json, (SELECT COALESCE(MAX(number), 0) FROM attempts a "
            "WHERE a.run_id = t.run_id AND a.seq = t.seq) FROM tasks t "
            "LEFT JOIN results r ON r.run_id = t.run_id AND r.seq = t.seq "
            "WHERE t.run_id = ? AND t.seq BETWEEN ? AND ? "
            "AND (r.state IS NULL OR r.state = 'cancelled') ORDER BY t.seq",
            (run_id, first, last if last is not None else 2**62)) as cur:
        async for seq, raw, attempts in cur:
            seqs.append(seq)
            heads.append(Task.model_validate_json(raw).head())
            prior.append(attempts)
    return seqs, heads, prior


async def unsummed_wall_ms(conn: StoreConnection, run: RunRecord) -> float:
    """The span of a run's current session up to its last heartbeat. A session adds its
    wall time to the run's when it ends, so one still executing — or killed — has not:
    without this an interrupted run read `wall 0 ms` and no cost rate."""
    if run.status != RunStatus.RUNNING:
        return 0.0
    async with conn.execute("SELECT MAX(at) FROM events WHERE run_id=? AND "
                            "kind='session_started'", (run.id,)) as cur:
        row = await cur.fetchone()
    since = row[0] if row and row[0] is not None else (
        run.started_at if not run.wall_ms else None)  # a store older than the event
    return 0.0 if since is None else max(0.0, run.heartbeat_at - since) * 1000.0


async def wall_ms_so_far(conn: StoreConnection, run: RunRecord) -> float:
    """The run's wall time: its ended sessions' sum, and the current one's span so far."""
    return run.wall_ms + await unsummed_wall_ms(conn, run)


async def claim_run(conn: StoreConnection, run: RunRecord, claim: Claim,
                    path: DbTarget) -> None:
    """Take over a run whose owner is gone: compare-and-swap on the claim token read with
    `run`, so of two processes that both saw it free exactly one wins."""
    # On this host the lock we hold proves no other executor; an executor of an older
    # version (no lock file) is known by its pid; another host's by its heartbeat lease.
    same_host = run.host == claim.host
    if run.status == RunStatus.RUNNING and (
            (same_host and not run.lock_path and run.pid and run.pid != claim.pid
             and pid_alive(run.pid, run.owner_started))
            or (not same_host and run.owner_alive())):
        claim.release()
        raise UserError(f"run {run.id}: still being executed by pid {run.pid} on {run.host} "
                        "(stopped or busy processes keep their run); resume it once that "
                        "process has ended")
    # what the previous executor had in flight when it died: sent, answers lost (booked
    # before this session numbers its attempts, so a re-send shows as sent twice)
    if run.owner_token:
        async with conn.execute("SELECT live_json FROM runs WHERE id=?", (run.id,)) as cur:
            row = await cur.fetchone()
        await book_lost_sends(conn, run.id, run.owner_token, row[0] if row else None)
    # the dead session's time, up to its last heartbeat, counts in the run's wall
    dead_ms = await unsummed_wall_ms(conn, run)
    cur = await conn.execute(
        "UPDATE runs SET status='running', heartbeat_at=?, pid=?, host=?, finished_at=NULL, "
        "live_json=NULL, wall_ms = wall_ms + ?, "
        "owner_token=?, owner_started=?, lock_path=? WHERE id=? AND owner_token IS ?",
        (time.time(), claim.pid, claim.host, dead_ms, claim.token, claim.started,
         str(claim.lock_path), run.id, run.owner_token))
    if cur.rowcount != 1:
        claim.release()
        raise UserError(f"run {run.id}: another process claimed it a moment ago ({path})")
    # The run's cancelled tasks are queued again (this session re-sends them): their new
    # results are then new rows, which readers following the run by rowid see (an update
    # in place would keep the old rowid and stay invisible to them). Their attempts stay.
    await conn.execute("DELETE FROM results WHERE run_id=? AND state='cancelled'", (run.id,))
    await conn.commit()


async def release_run(conn: StoreConnection, run_id: str, status: str, claim: Claim
                      ) -> None:
    """Give up a claimed run without executing it (nothing was left to send)."""
    await conn.execute("UPDATE runs SET status=?, owner_token=NULL WHERE id=? AND "
                       "owner_token=?", (status, run_id, claim.token))
    await conn.commit()
    claim.release()


async def log_events(conn: StoreConnection, run_id: str, kind: str,
                     details: list[str]) -> None:
    """Lines into the run's log after its writer has closed (a worker's end alerts)."""
    if details:
        now = time.time()
        await conn.executemany("INSERT INTO events (run_id, at, kind, actor, detail_json) "
                               "VALUES (?, ?, ?, NULL, ?)",
                               [(run_id, now, kind, d) for d in details])
        await conn.commit()


async def spent_usd(conn: StoreConnection, run_id: str) -> float:
    """What the run's succeeded tasks cost so far (a resume's budget starts from it)."""
    async with conn.execute("SELECT COALESCE(SUM(cost_usd), 0) FROM results WHERE run_id=? "
                            "AND state='succeeded'", (run_id,)) as cur:
        row = await cur.fetchone()
    return float(row[0]) if row else 0.0
