"""The one writer: commits a run's rows in batches and keeps its heartbeat.

Its rows come from the run's recorder (run/recorder.py: the engine's events as
tuples, appended here with no await and no I/O); a background task commits them at most
every `flush_interval` seconds or as soon as `max_rows` are pending. A crash loses at most
the rows of the last window. The writer knows the engine only as what it may hold or
stop (`Dispatch`) and what it asks at each commit (`RowSource`).

Dispatch never outruns the store: when a flush fails (disk full, I/O error, a lock held
past the busy timeout) the writer holds the runner's dispatch at once, journals the
unsaved rows (store/spill.py) and keeps retrying; if the store stays unwritable past the
grace period the run stops sending, waits for its calls in flight, journals them and
ends with `failure` set (exit 2). Every write is fenced on the run's claim token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Protocol

from swarm_tui.core.states import PERMIT_HOLD
from swarm_tui.store.claims import Claim
from swarm_tui.store.conn import StoreConnection, upsert
from swarm_tui.store.fences import LeaseFence, LostClaim, RunFence
from swarm_tui.store.lost_sends import supersede_lost
from swarm_tui.store.notify import CONTROL, ROWS, Listener, notify
from swarm_tui.store.runs import refresh_stats
from swarm_tui.store.spill import SpillJournal
from swarm_tui.store.target import DbTarget, db_error
from swarm_tui.store.wal_watch import WalWatch

RESULT_COLS = ("run_id, seq, state, model, gateway, bucket, key_fp, attempts, tokens_in, "
               "tokens_out, cached_in, usage_estimated, cost_usd, latency_ms, ttft_ms, queue_ms, "
               "status_code, error_class, error_message, response_text, finished_at")
# A result is final, except a cancelled one, which a resume replaces; a result arriving
# twice for one task (a journal replayed) keeps the first.
INSERT_RESULT = upsert("results", RESULT_COLS, "run_id, seq",
                       " WHERE results.state = 'cancelled'")
# Attempts are only ever inserted: a uid seen before (a replayed journal) is skipped.
INSERT_ATTEMPT = """
INSERT INTO attempts (uid, run_id, seq, number, model, gateway, key_fp, sent_at,
    queue_ms, latency_ms, ttft_ms, status_code, error_class, error_message, retry_wait_s,
    tokens_in, tokens_out, cached_in, outcome, retry_detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (uid) DO NOTHING
"""
UPSERT_KEY = upsert("key_state", "run_id, gateway, fingerprint, label, source, state, "
                    "cooling_until, reason, in_flight, calls, rate_limited, errors, tokens_in, "
                    "tokens_out, last_used, updated_at, worker",
                    "run_id, gateway, fingerprint, worker")
INSERT_KEY_CHANGE = ("INSERT INTO key_changes (run_id, at, gateway, fingerprint, worker, label, "
                     "source, state, cooling_until, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
INSERT_EVENT = "INSERT INTO events (run_id, at, kind, actor, detail_json) VALUES (?, ?, ?, ?, ?)"
ATTEMPT_FIELDS = INSERT_ATTEMPT.count("?")  # a journal's older rows have fewer (padded)
SQL_BY_TABLE = {"attempt": INSERT_ATTEMPT, "result": INSERT_RESULT, "event": INSERT_EVENT}
TABLE_ORDER = ("attempt", "result", "event")  # attempts first: a result's attempts exist
CONTROL_POLL_S = 0.5  # between_flushes at least this often (a command queued)
STORE_HOLD = "store"        # the runner's dispatch hold while results are unsaved
BACKLOG_HOLD = "store-backlog"
STORE_STOPPED = "store_unwritable"
LOST_CLAIM = "lost_claim"


class Dispatch(Protocol):
    """What the writer may do to the dispatch of the run it stores (the runner)."""

    holds: dict[str, str]
    send_permit: Callable[[], str | None] | None
    wall_ms: float

    def hold(self, reason: str, detail: str) -> None: ...
    def release(self, reason: str, detail: str) -> None: ...
    def stop(self, reason: str, detail: str) -> None: ...
    def note(self, detail: str) -> None: ...


class RowSource(Protocol):
    """What the writer asks of the run at a commit (run/recorder.py)."""

    def figures(self) -> dict: ...
    def lag(self) -> dict: ...
    def key_rows(self, now: float) -> list[tuple]: ...
    def key_changes(self, now: float) -> tuple[list[tuple], Mapping[tuple[str, str], tuple]]: ...
    def keys_committed(self, seen: Mapping[tuple[str, str], tuple]) -> None: ...


class WriterStats:
    __slots__ = ("flush_ms_max", "flush_ms_total", "flushes", "max_pending", "rows")

    def __init__(self) -> None:
        self.flushes = 0
        self.rows = 0
        self.max_pending = 0
        self.flush_ms_max = 0.0
        self.flush_ms_total = 0.0


class StoreWriter:
    def __init__(self, conn: StoreConnection, path: DbTarget, run_id: str, runner: Dispatch,
                 *, claim: Claim, flush_interval: float = 0.25, max_rows: int = 5000,
                 heartbeat_s: float = 1.0, grace_s: float = 60.0,
                 fence: RunFence | LeaseFence | None = None,
                 say: Callable[[str], None] | None = None,
                 warn: Callable[[str], None] | None = None,
                 wal_warn_bytes: int = 128 << 20) -> None:
        self.conn = conn
        self.path = path
        self.run_id = run_id
        self.runner = runner
        self.claim = claim
        self.fence = fence or RunFence(run_id, claim.token)
        self.flush_interval = flush_interval
        self.max_rows = max_rows
        self.heartbeat_s = heartbeat_s
        self.grace_s = grace_s
        # where a worker says that its store holds it, and when that ends (it showed
        # nothing for as long as a lock lasted); where a warning goes (not to a console's
        # screen: its log shows it)
        self.say = say
        self.warn = warn
        self.wal = WalWatch(path, wal_warn_bytes) if isinstance(path, Path) else None
        self.stats = WriterStats()
        self.error: str | None = None      # the last flush's failure, while it lasts
        self.failure: str | None = None    # why the run could not be stored (exit 2)
        self.failing_since: float | None = None
        # a worker's journal is its own: workers of one run on one host shared one file,
        # and the first to finish removed the others' unsaved answers
        self.journal = SpillJournal(path, run_id, owner=(
            f"w{claim.pid}" if isinstance(self.fence, LeaseFence) else None))
        self._tasks: list[tuple] = []
        self._attempts: list[tuple] = []
        self._events: list[tuple] = []
        self._spilled: list[tuple[str, tuple]] = []  # journaled, not yet in the database
        self.recorder: RowSource | None = None  # set by the run's recorder
        self._kick = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._last_poll = -math.inf  # never: monotonic time starts near 0 at boot
        self._last_keys = -math.inf
        # the run host's step between two flushes (run/control_poll.py applies the
        # commands queued for the run): on the writer's connection, never during a commit
        self.between_flushes: Callable[[], Awaitable[None]] | None = None
        self._last_live: dict = {}  # the live figures last stored (same: no notification)
        self._stored = 0            # rows this writer committed …
        self._analyze_at = 1_000    # … and when PostgreSQL's statistics are refreshed next

    # -- rows in: called inline by the engine (through the recorder), so only appends ------
    def add(self, table: str, row: tuple) -> None:
        """One row for the next commit: "attempt", "result" or "event" (looked up each
        time: a flush takes the lists and puts new ones in their place)."""
        if table == "result":
            self._tasks.append(row)
        elif table == "attempt":
            self._attempts.append(row)
        else:
            self._events.append(row)

    def added(self) -> None:
        """After the rows of one event: flush early when the batch is full; hold dispatch
        when the store falls far behind."""
        pending = len(self._tasks) + len(self._attempts)
        if pending > self.stats.max_pending:
            self.stats.max_pending = pending
        if pending >= self.max_rows:
            self._kick.set()
            if pending >= 4 * self.max_rows and BACKLOG_HOLD not in self.runner.holds:
                # the store is slower than the swarm: sending more only grows what a
                # crash would lose
                self.runner.hold(BACKLOG_HOLD, f"store: {pending} results not yet written; "
                                               "dispatch waits for the writer")

    @property
    def worker(self) -> str:
        """This process's name among a run's workers; '' for a run's single executor."""
        return self.fence.worker if isinstance(self.fence, LeaseFence) else ""

    def log_event(self, kind: str, detail_json: str | None = None,
                  actor: str | None = None) -> None:
        self._events.append((self.run_id, time.time(), kind, actor, detail_json))

    @property
    def unsaved(self) -> int:
        return len(self._tasks) + len(self._attempts) + len(self._spilled)

    # -- the flushing task -----------------------------------------------------------------
    def start(self) -> None:
        self.journal.reserve()
        if isinstance(self.fence, LeaseFence):  # no send past the lease on its own clock
            self.runner.send_permit = self.fence.permit
        self._loop_task = asyncio.create_task(self._loop())
        self._loop_task.add_done_callback(self._loop_ended)

    def _loop_ended(self, task: asyncio.Task) -> None:
        """A writer that dies stops dispatch at once: nothing more is sent that could not
        be stored (what is unsaved is journaled by close)."""
        if task.cancelled() or task.exception() is None:
            return
        e = task.exception()
        self.error = f"store writer stopped: {type(e).__name__}: {e}"
        if self.failure is None:
            self.failure = STORE_STOPPED
            self.runner.stop(STORE_STOPPED, f"{self.error}; no more sends")

    async def _loop(self) -> None:
        # PostgreSQL: a command queued for this run wakes the loop at once (the poll stays,
        # as the net under a lost notification)
        listener = await Listener.open(self.path, (CONTROL,), self._notified)
        try:
            while not self._stopping:
                with contextlib.suppress(TimeoutError):  # (not wait_for: see canary/controller)
                    async with asyncio.timeout(self.flush_interval):
                        await self._kick.wait()
                self._kick.clear()
                await self.flush()
                told = listener is not None and listener.take(CONTROL, self.run_id)
                step = self.between_flushes
                if step is not None and self.error is None and (
                        told or time.monotonic() - self._last_poll >= CONTROL_POLL_S):
                    self._last_poll = time.monotonic()
                    await step()
        finally:
            if listener is not None:
                await listener.close()

    def _notified(self, channel: str, key: str) -> None:
        if key in (self.run_id, "*"):  # "*": listening again after a lost link
            self._kick.set()

    def _take_pending(self) -> list[tuple[str, tuple]]:
        rows = ([("attempt", r) for r in self._attempts] + [("result", r) for r in self._tasks]
                + [("event", r) for r in self._events])
        self._tasks, self._attempts, self._events = [], [], []
        return rows

    async def flush(self) -> None:
        if self.failure == LOST_CLAIM:
            if isinstance(self.fence, LeaseFence):
                await self._salvage()
            else:
                self._spill(self._take_pending())  # not ours to write any more: journal
            return
        fresh = self._take_pending()
        now = time.time()
        keys = now - self._last_keys >= self.heartbeat_s
        batch = self._spilled + fresh
        t0 = time.perf_counter()
        try:
            await self._commit(batch, now, keys)
        except LostClaim:
            self._spill(fresh)
            self._lost_claim()
            return
        except sqlite3.Error as e:
            self._spill(fresh)
            self._store_failed(e)
            return
        except BaseException:
            self._requeue(fresh)  # cancelled mid-flush: close() writes or journals them
            raise
        self._spilled = []
        self.journal.clear()
        self._stored += len(batch)
        if self._stored >= self._analyze_at:  # 1,000 rows, then each doubling
            self._analyze_at *= 2
            await refresh_stats(self.conn, "results", "attempts")
        if keys:
            self._last_keys = now
        self._recovered()
        if self.wal is not None and (line := await self.wal.check(self.conn,
                                                                  time.monotonic())):
            self.runner.note(line)
            _tell(self.warn, line)
        ms = (time.perf_counter() - t0) * 1000.0
        st = self.stats
        st.flushes += 1
        st.rows += len(batch)
        st.flush_ms_total += ms
        st.flush_ms_max = max(st.flush_ms_max, ms)

    async def _commit(self, batch: list[tuple[str, tuple]], now: float, keys: bool) -> None:
        await self.conn.execute("BEGIN IMMEDIATE")
        try:
            # the fence: only the claim's holder writes into the run
            rec = self.recorder
            figures = rec.figures() if rec is not None else {}
            moved = batch or figures != self._last_live  # (the loop's lag moves anyway)
            self._last_live = figures
            live = json.dumps({**figures, **(rec.lag() if rec is not None else {}),
                               # this session, for a worker that finds it stuck holding
                               # an expired batch's locks (store/leases.py)
                               "db_pid": getattr(self.conn, "backend_pid", None)})
            await self.fence.hold(self.conn, now, live)
            for table in TABLE_ORDER:
                rows = [r for t, r in batch if t == table]
                if rows:
                    await self.conn.executemany(SQL_BY_TABLE[table], rows)
            if keys and rec is not None:
                await self.conn.executemany(UPSERT_KEY, rec.key_rows(now))
            changes, seen = rec.key_changes(now) if rec is not None else ([], {})
            if changes:
                await self.conn.executemany(INSERT_KEY_CHANGE, changes)
            done = await self.fence.settle(self.conn, batch, now)
            if moved:  # watchers read once it commits
                await notify(self.conn, ROWS, self.run_id)
            await self.conn.execute("COMMIT")
            if rec is not None:
                rec.keys_committed(seen)
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                await self.conn.execute("ROLLBACK")
            raise
        self.fence.committed(done)

    async def _salvage(self) -> None:
        """A worker whose lease was taken (it was stopped or cut off past it) still writes
        what it sent and was answered — unfenced, which the rows allow: attempts are only
        inserted (by uid), a result only where the task has none, and no batch is marked
        done. So a task the next holder sends again shows as SENT MORE THAN ONCE, with
        both calls' cost, instead of vanishing with this process."""
        batch = self._spilled + self._take_pending()
        if not batch:
            return
        try:
            await self.conn.execute("BEGIN IMMEDIATE")
            try:
                for table in TABLE_ORDER:
                    rows = [r for t, r in batch if t == table]
                    if table == "attempt":
                        await supersede_lost(self.conn, rows)
                    if rows:
                        await self.conn.executemany(SQL_BY_TABLE[table], rows)
                await self.conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    await self.conn.execute("ROLLBACK")
                raise
        except sqlite3.Error:
            fresh = batch[len(self._spilled):]
            self._spill(fresh)  # journaled; imported once this worker is gone
            return
        self._spilled = []
        self.journal.clear()

    def _requeue(self, rows: list[tuple[str, tuple]]) -> None:
        lists = {"attempt": self._attempts, "result": self._tasks, "event": self._events}
        for table, row in reversed(rows):
            lists[table].insert(0, row)

    def _spill(self, rows: list[tuple[str, tuple]]) -> None:
        """Journal rows the database did not take (fsynced), and keep them to retry."""
        if rows:
            self.journal.append(rows)
            self._spilled += rows

    def _store_failed(self, e: sqlite3.Error) -> None:
        self.error = str(db_error(self.path, e))
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
            held = (f"store: cannot write ({self.error}); dispatch paused with {self.unsaved} "
                    "results kept" + (f" (journal {self.journal.path})"
                                      if self.journal.path else ""))
            self.runner.hold(STORE_HOLD, held)
            _tell(self.say, held)
        elif (now - self.failing_since >= self.grace_s and self.failure is None):
            self.failure = STORE_STOPPED
            stopped = (f"store: still unwritable after {self.grace_s:.0f} s; no more sends, "
                       "waiting for the calls in flight")
            self.runner.stop(STORE_STOPPED, stopped)
            _tell(self.say, stopped)

    def _recovered(self) -> None:
        self.error = None
        if PERMIT_HOLD in self.runner.holds and self.runner.send_permit is not None \
                and self.runner.send_permit() is None:
            self.runner.release(PERMIT_HOLD, "worker: lease renewed; dispatch resumed")
        if self.failing_since is not None:
            self.failing_since = None
            self.runner.release(STORE_HOLD, "store: writable again; dispatch resumed")
            _tell(self.say, "store: writable again; dispatch resumed")
        if BACKLOG_HOLD in self.runner.holds:
            self.runner.release(BACKLOG_HOLD, "store: caught up; dispatch resumed")

    def _lost_claim(self) -> None:
        if self.failure != LOST_CLAIM:
            self.failure = LOST_CLAIM
            self.error = (f"run {self.run_id}: another process claimed it; this one stopped "
                          "sending")
            self.runner.stop(LOST_CLAIM, self.error)

    def failure_line(self) -> str:
        """One line for the user: why the run ended unsaved and where its results are."""
        kept = len(self._spilled)
        cause = self.error or "results not stored"
        if self.journal.error and kept:
            where = f"{kept} results could NOT be journaled ({self.journal.error})"
        elif kept:
            where = f"{kept} unsaved results journaled to {self.journal.path}"
        else:
            where = "nothing unsaved"
        return (f"{cause}; {where}; `swarm-tui resume {self.run_id}` imports them and sends "
                "only unanswered tasks")

    async def close(self, status: str, summary_json: str | None = None) -> None:
        """Let the loop finish its flush, flush the rest, record how the session ended."""
        self._stopping = True
        self._kick.set()
        if self._loop_task is not None:
            with contextlib.suppress(Exception):  # its death was told (_loop_ended)
                await self._loop_task
        self._last_keys = -math.inf
        await self.flush()
        if self.error is not None:
            self.failure = self.failure or STORE_STOPPED
        if self.failure is None:
            try:
                if not await self.fence.release(self.conn, status, self.runner.wall_ms):
                    self._lost_claim()
            except sqlite3.Error as e:
                self.error = str(db_error(self.path, e))
                self.failure = STORE_STOPPED
        if self.failure is None:
            self.journal.discard()
        else:
            self.journal.close()
        self.claim.release()


def _tell(to: Callable[[str], None] | None, line: str) -> None:
    if to is not None:
        with contextlib.suppress(OSError):  # a terminal gone (hang-up): the run goes on
            to(line)
