"""What makes a writer's flush its own to write: the fence checked in each transaction.

- `RunFence`: one executor owns the run; its claim token is in the run's row.
- `LeaseFence`: a worker owns the batches it leased (store/leases.py); each flush renews
  them, and a flush that finds one leased to someone else (it expired: this process was
  stopped or cut off longer than the lease) stops the worker, as a lost claim does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from swarm_tui.store.conn import StoreConnection

CANCELLED = "cancelled"
SUCCEEDED = "succeeded"
LEASE_MARGIN_S = 0.5  # stop sending this long before the lease could lapse
RESULT_COST = 12  # cost_usd's place in a result row (store/writer.py: RESULT_COLS)


class LostClaim(Exception):
    """The run (or a leased batch) belongs to another executor now."""


class RunFence:
    def __init__(self, run_id: str, token: str) -> None:
        self.run_id, self.token = run_id, token

    async def hold(self, conn: StoreConnection, now: float, live: str) -> None:
        cur = await conn.execute(
            "UPDATE runs SET heartbeat_at=?, live_json=? WHERE id=? AND owner_token=?",
            (now, live, self.run_id, self.token))
        if cur.rowcount != 1:
            raise LostClaim

    async def settle(self, conn: StoreConnection, rows: Sequence[tuple[str, tuple]],
                     now: float) -> list[int]:
        return []

    def committed(self, done: list[int]) -> None:
        pass

    async def release(self, conn: StoreConnection, status: str, wall_ms: float) -> bool:
        """The session's end in the run's row; False when the claim was lost meanwhile."""
        cur = await conn.execute(
            "UPDATE runs SET status=?, finished_at=?, heartbeat_at=?, wall_ms = wall_ms + ?, "
            "owner_token=NULL WHERE id=? AND owner_token=?",
            (status, time.time(), time.time(), wall_ms, self.run_id, self.token))
        return cur.rowcount == 1


class LeaseFence:
    """A worker's batches: seq ranges it holds, and how many of each still lack a result."""

    def __init__(self, run_id: str, worker: str, token: str, lease_s: float) -> None:
        self.run_id, self.worker, self.token, self.lease_s = run_id, worker, token, lease_s
        self.ranges: dict[int, tuple[int, int]] = {}   # batch -> (first seq, last seq)
        self.missing: dict[int, int] = {}              # batch -> results still to store
        self.done: list[int] = []
        self._stored: dict[int, int] = {}
        # on this process's own clock: until when each batch it holds is surely still its
        # own (its lease was taken or renewed by a statement sent no earlier than this
        # less lease_s). Past the earliest nothing is sent, whatever the next flush finds.
        self.deadline: dict[int, float] = {}
        self._renewing: tuple[float, set[int]] | None = None

    def add(self, batch: int, first: int, last: int, leased_from: float) -> None:
        """A batch just leased, counted whole until `count` says how many lack a result
        (before any of its tasks is sent, so no result of it can be counted meanwhile).
        `leased_from`: monotonic time before its lease statement was sent."""
        self.ranges[batch] = (first, last)
        self.missing[batch] = last - first + 1
        self.deadline[batch] = leased_from + self.lease_s

    @property
    def valid_until(self) -> float:
        return min(self.deadline.values(), default=math.inf)

    def permit(self) -> str | None:
        """None while sending is covered by the lease; else why not (the runner holds)."""
        if time.monotonic() < self.valid_until - LEASE_MARGIN_S:
            return None
        return (f"worker: its lease of {self.lease_s:.0f} s was not renewed in time "
                "(stopped, cut off or a slow store); no sends until it is")

    def count(self, batch: int, missing: int) -> None:
        self.missing[batch] = missing

    @property
    def held(self) -> int:
        return len(self.missing)

    def _batch_of(self, seq: int) -> int | None:
        for batch, (first, last) in self.ranges.items():
            if first <= seq <= last:
                return batch
        return None

    async def hold(self, conn: StoreConnection, now: float, live: str) -> None:
        if self.missing:
            # every batch this worker holds must still carry its token. Which ones: taken
            # before the statement is sent — a batch leased while it runs joins `missing`
            # after its lease committed, possibly after this UPDATE's snapshot (it is
            # renewed by the next flush; a lease outlives many flushes)
            held = set(self.missing)
            self._renewing = (time.monotonic(), held)
            async with conn.execute(
                    "UPDATE batches SET expires_at=? WHERE run_id=? AND token=? AND "
                    "done_at IS NULL RETURNING batch",
                    (now + self.lease_s, self.run_id, self.token)) as cur:
                renewed = {r[0] for r in await cur.fetchall()}
            if not held <= renewed:
                raise LostClaim
        # its own row only: the run's row, shared by every worker, is beaten outside the
        # flush (store/leases.beat_run) — held in every worker's flush transaction, it
        # queued the workers behind each other (PostgreSQL: 2 workers 1.7x slower than 1)
        # ... and ended by nobody else: a draw on the shared budget ends a worker silent
        # longer than its lease and gives its allowance back (store/budget_ledger.py)
        cur = await conn.execute(
            "UPDATE workers SET heartbeat_at=?, live_json=? WHERE run_id=? AND worker=? AND "
            "ended_at IS NULL", (now, live, self.run_id, self.worker))
        if cur.rowcount != 1:
            raise LostClaim

    async def settle(self, conn: StoreConnection, rows: Sequence[tuple[str, tuple]],
                     now: float) -> list[int]:
        """Batches whose last result is in this transaction are marked done in it. (The
        counts change only once it commits: `committed`; a batch leased meanwhile is
        another entry, untouched.)"""
        stored: dict[int, int] = {}
        spent = 0.0
        for table, row in rows:
            if table == "result" and row[2] != CANCELLED:
                batch = self._batch_of(row[1])
                if batch is not None and batch in self.missing:
                    stored[batch] = stored.get(batch, 0) + 1
                if row[2] == SUCCEEDED and row[RESULT_COST]:
                    spent += row[RESULT_COST]
        done = [b for b, n in self.missing.items() if n - stored.get(b, 0) <= 0]
        if done:
            await conn.executemany(
                "UPDATE batches SET done_at=? WHERE run_id=? AND batch=? AND token=?",
                [(now, self.run_id, b, self.token) for b in done])
        if spent:  # the shared budget's ledger counts what is stored, with it
            await conn.execute("UPDATE workers SET spent_usd = spent_usd + ? WHERE run_id=? "
                               "AND worker=?", (spent, self.run_id, self.worker))
        self._stored = stored
        return done

    def committed(self, done: list[int]) -> None:
        if self._renewing is not None:  # the batches held then were renewed by it
            since, held = self._renewing
            self._renewing = None
            for batch in held & self.deadline.keys():
                self.deadline[batch] = since + self.lease_s
        for batch, n in self._stored.items():
            if batch in self.missing:
                self.missing[batch] -= n
        for batch in done:
            self.missing.pop(batch, None)
            self.ranges.pop(batch, None)
            self.deadline.pop(batch, None)
        self.done += done

    async def release(self, conn: StoreConnection, status: str, wall_ms: float) -> bool:
        """The worker leaves: batches it did not finish can be leased at once."""
        await conn.execute("UPDATE batches SET expires_at=NULL WHERE run_id=? AND token=? "
                           "AND done_at IS NULL", (self.run_id, self.token))
        await conn.execute("UPDATE workers SET ended_at=?, heartbeat_at=? WHERE run_id=? AND "
                           "worker=?", (time.time(), time.time(), self.run_id, self.worker))
        return True
