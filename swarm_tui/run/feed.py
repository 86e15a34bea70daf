"""A worker's feed: leases its run's batches while its runner has room and hands their
unanswered tasks to the runner, beats the run's heartbeat, shares the run's concurrency and
key quotas among the live workers, and draws on the run's budget cap (run/
shared_budget.py). It ends once the run has no batch left that is not done.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from swarm_tui.core.events import CONTROL
from swarm_tui.engine.runner import SwarmRunner
from swarm_tui.run.shared_budget import SharedBudget
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.fences import LeaseFence
from swarm_tui.store.leases import (
    Lease,
    batches_left,
    beat_run,
    lease_batch,
    live_workers,
)
from swarm_tui.store.runs import resumable_tasks
from swarm_tui.store.target import DbTarget, db_error
from swarm_tui.store.writer import STORE_STOPPED

FEED_POLL_S = 0.2  # how often a worker looks for room, new batches, expired leases


@dataclass
class FeedState:
    """What the feed keeps across a store error it retries: a lease taken but not yet fed
    to the runner is fed on the next pass, never left held and unsent."""
    last_beat: float = -math.inf  # never (the loop's clock starts near 0 at boot)
    unfed: list[Lease] = field(default_factory=list)


async def feed(conn: StoreConnection, runner: SwarmRunner, fence: LeaseFence, run_id: str,
                worker: str, total_concurrency: int, shared: bool, expected: int,
                budget: SharedBudget | None, state: FeedState,
                healthy: Callable[[], None]) -> None:
    """Lease batches while the runner has room (and draw on the run's cap for them); end
    the feed once the run has no batch left that is not done (a dead worker's come back
    when their leases expire)."""
    loop = asyncio.get_running_loop()
    while True:
        now = loop.time()
        if now - state.last_beat >= 1.0:
            await beat_run(conn, run_id)
            sharing = max(await live_workers(conn, run_id), expected)
            state.last_beat = now
            # the keys' quotas are the run's: each worker spends its share of what the
            # gateway's headers say remains (the gateway counts every worker's calls)
            runner.set_rate_share(1.0 / sharing)
            share = math.ceil(total_concurrency / sharing)
            if shared and share != runner.limit:
                runner.set_concurrency(share)
        if budget is not None and not runner.stop_reason:
            await budget.tend(conn)
        if runner.cancelled or runner.stop_reason:
            runner.end_feed()
            return
        while state.unfed or runner.backlog < runner.limit:
            if not state.unfed:
                leased_from = time.monotonic()  # its lease runs from no earlier than this
                lease = await lease_batch(conn, run_id, worker, fence.token, fence.lease_s)
                if lease is None:
                    break
                # in the fence at once: the next flush renews it with the others
                fence.add(lease.batch, lease.first_seq, lease.last_seq, leased_from)
                state.unfed.append(lease)
            lease = state.unfed[0]
            seqs, heads, prior = await resumable_tasks(conn, run_id, lease.first_seq,
                                                       lease.last_seq)
            state.unfed.pop(0)
            fence.count(lease.batch, len(seqs))
            if seqs:
                runner.add_tasks(heads, seqs, prior)
        if fence.held == 0 and runner.backlog == 0 and not runner.in_flight \
                and await batches_left(conn, run_id) == 0:
            runner.end_feed()
            return
        healthy()
        await asyncio.sleep(FEED_POLL_S)


async def feeding(conn: StoreConnection, runner: SwarmRunner, fence: LeaseFence,
                   run_id: str, worker: str, total: int, *, shared: bool,
                   expected: int, budget: SharedBudget | None, grace_s: float,
                   target: DbTarget) -> None:
    """The feed. A store error (a deadlock, a lock timeout, a server restarting) is tried
    again for up to the store's grace, as the writer does; then dispatch stops with the
    reason — never a runner left waiting for tasks that will not come."""
    loop = asyncio.get_running_loop()
    state = FeedState()
    failing_since: float | None = None

    def healthy() -> None:
        nonlocal failing_since
        failing_since = None

    while True:
        try:
            await feed(conn, runner, fence, run_id, worker, total, shared, expected, budget,
                        state, healthy)
            return
        except sqlite3.Error as e:
            now = loop.time()
            why = db_error(target, e)  # a locked SQLite file: who holds it, and how to free it
            if failing_since is None:
                failing_since = now
                runner.emit(CONTROL, detail=f"worker: the store refused the feed ({why}); "
                                            "trying again")
            if now - failing_since > grace_s:
                runner.stop(STORE_STOPPED, f"worker: cannot lease batches ({why}); no more "
                                           "sends")
                runner.end_feed()
                return
            await asyncio.sleep(FEED_POLL_S)
