"""A stored run's prompts, read back from its `tasks` rows just before each send.

The engine holds only a head per task (engine/bodies.py); the whole task is read here in
blocks of consecutive seqs, one block ahead of the sends, so a send almost never waits:
100,000 tasks' prompts (~300 MB in the team's shape) are never in memory at once."""

from __future__ import annotations

import asyncio
import sqlite3
import time

from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.db import open_db
from swarm_tui.store.target import DbTarget
from swarm_tui.workload import Task

BLOCK = 256        # seqs per read (~0.8 MB of JSON in the team's shape)
KEEP_BEHIND = 2    # blocks kept behind the newest one read (tasks parked meanwhile)


class StoredBodies:
    """One read connection of its own: a send never queues behind the writer's batch."""

    def __init__(self, db_target: DbTarget, run_id: str, grace_s: float = 60.0) -> None:
        self.db_target, self.run_id = db_target, run_id
        self.grace_s = grace_s  # a store that fails this long leaves the task unsent
        self._conn: StoreConnection | None = None
        self._opening: asyncio.Task[StoreConnection] | None = None
        self._cache: dict[int, Task] = {}
        self._blocks: dict[int, asyncio.Task[None]] = {}  # started reads, by block
        self._newest = -1
        self.reads = 0  # block and row reads made (the bench and tests look)

    def ready(self, index: int, seq: int) -> Task | None:
        task = self._cache.pop(seq, None)
        if task is not None and seq % BLOCK >= BLOCK // 2:
            self._start(seq // BLOCK + 1)  # read the next block while this one is sent
        return task

    async def load(self, index: int, seq: int) -> Task:
        """The task's prompt, read again while the store fails (a restart, a lost link)
        for up to the store's grace; the wait is the send's queue time."""
        deadline = time.monotonic() + self.grace_s
        wait = 0.1
        while True:
            try:
                return await self._load(seq)
            except sqlite3.Error:
                if time.monotonic() + wait > deadline:
                    raise
                await asyncio.sleep(wait)
                wait = min(wait * 2, 2.0)

    async def _load(self, seq: int) -> Task:
        block = seq // BLOCK
        if block not in self._blocks:
            if block < self._newest - KEEP_BEHIND:  # let go of (a task parked long)
                return await self._row(seq)
            self._start(block)
        # shielded: a cancelled send must not cancel the read other sends wait on
        await asyncio.shield(self._blocks[block])
        task = self._cache.pop(seq, None)
        if task is None:  # read before and let go of (a task parked long): read it alone
            task = await self._row(seq)
        return task

    def _start(self, block: int) -> None:
        if block in self._blocks:
            return
        fut = asyncio.ensure_future(self._read_block(block))
        # a read ahead nobody waits on may fail quietly: the send that needs it reads again
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._blocks[block] = fut
        if block > self._newest:
            self._newest = block
            floor = (block - KEEP_BEHIND) * BLOCK
            for seq in [s for s in self._cache if s < floor]:
                del self._cache[seq]
            # finished reads behind the kept blocks go too (one per 256 tasks otherwise)
            for old in [b for b, f in self._blocks.items()
                        if b < block - KEEP_BEHIND and f.done()]:
                del self._blocks[old]

    async def _connection(self) -> StoreConnection:
        if self._conn is None:
            if self._opening is None:
                self._opening = asyncio.ensure_future(
                    open_db(self.db_target, create=False, reconcile=False))
            self._conn = await asyncio.shield(self._opening)
        return self._conn

    async def _read_block(self, block: int) -> None:
        conn = await self._connection()
        try:
            async with conn.execute(
                    "SELECT seq, task_json FROM tasks WHERE run_id=? AND seq>=? AND seq<?",
                    (self.run_id, block * BLOCK, (block + 1) * BLOCK)) as cur:
                rows = await cur.fetchall()
        except BaseException:
            self._blocks.pop(block, None)  # the next send asks again
            raise
        self.reads += 1
        if block >= self._newest - KEEP_BEHIND:
            for seq, raw in rows:
                self._cache[seq] = Task.model_validate_json(raw)

    async def _row(self, seq: int) -> Task:
        conn = await self._connection()
        async with conn.execute("SELECT task_json FROM tasks WHERE run_id=? AND seq=?",
                                (self.run_id, seq)) as cur:
            row = await cur.fetchone()
        self.reads += 1
        if row is None:
            raise LookupError(f"run {self.run_id} has no task #{seq}")
        return Task.model_validate_json(row[0])

    async def aclose(self) -> None:
        for fut in self._blocks.values():
            fut.cancel()
        await asyncio.gather(*self._blocks.values(), return_exceptions=True)
        if self._opening is not None and self._conn is None:
            self._opening.cancel()
            await asyncio.gather(self._opening, return_exceptions=True)
        if self._conn is not None:
            await self._conn.close()
        self._conn = self._opening = None
        self._cache.clear()
