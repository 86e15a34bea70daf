"""A run executed by worker processes that lease its batches (issue 17).

`prepare` stores a new run split into batches and leaves it unowned; `work` is one
worker: it leases batches while its runner has room (run/feed.py), feeds their
unanswered tasks to one runner (no drain between batches), writes results fenced on its
leases, and leaves
when every batch of the run is done — waiting, meanwhile, for a dead worker's leases to
expire so that its batches are done too. The last worker out marks the run finished.

The run's concurrency is global: each worker runs its share, the run's figure divided by
the workers beating in the store (at least as many as the run was started with),
refreshed every second. So is its budget cap: each worker draws its allowance from the
cap through the store (run/shared_budget.py, store/budget_ledger.py); the last
worker stopped at the cap marks the run budget_stopped, resumable like any other. And so
is a canary: every worker follows the stored canary (run/sidecars.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
from collections.abc import AsyncIterator

from swarm_tui.aio import cancel_and_wait
from swarm_tui.canary.controller import CanaryController
from swarm_tui.core.events import CONTROL
from swarm_tui.core.states import RunStatus
from swarm_tui.core.summary import RunSummary
from swarm_tui.engine.routing import CanaryRouter
from swarm_tui.engine.runner import BUDGET_STOPPED, SwarmRunner
from swarm_tui.errors import UserError
from swarm_tui.ops.alerts import Alert
from swarm_tui.ops.attach import end_alert_of, page_once
from swarm_tui.report.history import load_summary
from swarm_tui.run.feed import feeding
from swarm_tui.run.lifecycle import RunLifecycle
from swarm_tui.run.shared_budget import SharedBudget
from swarm_tui.run.stored_run import Outcome, config_snapshot, keep_replay, pinned_gateway
from swarm_tui.run.wiring import RunOptions, RunSetup
from swarm_tui.settings.loader import LoadedConfig
from swarm_tui.settings.run_sections import AlertKind
from swarm_tui.store.claims import take_lock
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.db import open_db
from swarm_tui.store.fences import LeaseFence
from swarm_tui.store.leases import (
    budget_stop_run,
    cancel_split_run,
    finish_run,
    join_run,
    lease_seconds,
    split_run,
)
from swarm_tui.store.runs import (
    create_run,
    get_run,
    log_events,
    refresh_stats,
    save_summary,
)
from swarm_tui.store.target import DbTarget
from swarm_tui.store.task_bodies import StoredBodies
from swarm_tui.store.writer import LOST_CLAIM, STORE_STOPPED
from swarm_tui.workload import Workload


def _refuse_in_one_process(setup: RunSetup) -> None:
    if setup.simulated:
        raise UserError("--workers / worker: the built-in simulator lives in one process; "
                        "point a config's gateway at a server every worker reaches (e.g. "
                        "`swarm-tui sim --port 8000`)")


def _same_canary(setup: RunSetup, run_id: str, snap: dict) -> None:
    """A canary run's workers all follow its canary: one whose config has another (or
    none) would route its share elsewhere."""
    mine = setup.canary.name if setup.canary is not None else None
    if mine != snap.get("canary"):
        raise UserError(f"worker: run {run_id} was started with canary "
                        f"{snap.get('canary') or '(none)'}, this worker's config has "
                        f"{mine or '(none)'}: start it with the run's config")


async def prepare(conn: StoreConnection, db_target: DbTarget, cfg: LoadedConfig,
                  opts: RunOptions, workload: Workload, run_id: str, workers: int) -> int:
    """Store the run and its batches; no process owns it (workers lease its batches).
    `workers`: how many it starts with — each one's share from the first second."""
    setup = RunSetup(cfg, opts)
    _refuse_in_one_process(setup)
    setup.open()  # clients only (routing): nothing is sent
    if setup.canary is not None:  # the stored rows say where the canary sends them now
        assert isinstance(setup.router, CanaryRouter)
        canary = CanaryController(setup.canary, setup.router, db_target)
        await canary.open()
        await canary.close()
    bodies = StoredBodies(db_target, run_id)  # never read here: the runner only routes
    try:
        runner = setup.make_runner(workload.heads, bodies=bodies)
        claim = take_lock(db_target, run_id)
        try:
            await create_run(conn, run_id, runner.records,
                             (setup.forced_model(t) for t in workload), name=opts.name,
                             simulated=False,
                             config={**config_snapshot(setup, opts), "workers": workers},
                             claim=claim)
            batches = await split_run(conn, run_id, len(runner.records))
        finally:
            claim.release()
    finally:
        await bodies.aclose()
        await setup.aclose()
    return batches



def _feed_ended(task: asyncio.Task[None], runner: SwarmRunner) -> None:
    """A feed that dies must not leave its runner waiting for tasks that never come (the
    worker would beat on, holding nothing, forever): dispatch stops, with the cause."""
    if task.cancelled() or task.exception() is None:
        return
    e = task.exception()
    runner.emit(CONTROL, detail=f"worker: its feed stopped ({type(e).__name__}: {e}); "
                                "no more sends")
    runner.stop(STORE_STOPPED, "worker: cannot lease batches any more; no more sends")
    runner.end_feed()

class LeaseTaken(Exception):
    """This worker's batch went to another (it was stopped or cut off past its lease):
    what it was answered is stored (salvaged), and it may join the run again afresh."""


async def work_to_the_end(conn: StoreConnection, db_target: DbTarget, cfg: LoadedConfig,
                          opts: RunOptions, run_id: str, *, show_progress: bool) -> Outcome:
    """A worker that comes back: fenced off one batch, it stores what it has, then joins
    the run again with a new token and leases afresh — a worker stopped for a while (a
    stalled VM, SIGSTOP) is not lost to the run for the rest of it."""
    rejoin = False
    while True:
        try:
            return await work(conn, db_target, cfg, opts, run_id, show_progress=show_progress,
                              rejoin=rejoin)
        except LeaseTaken as e:
            if show_progress:
                print(f"swarm-tui: {e}; joining the run again", file=sys.stderr)
            rejoin = True


async def work(conn: StoreConnection, db_target: DbTarget, cfg: LoadedConfig, opts: RunOptions,
               run_id: str, *, show_progress: bool, rejoin: bool = False) -> Outcome:
    """One worker of a run, to the run's end (or this worker's cancel)."""
    record = await get_run(conn, run_id, db_target)
    if record.status != RunStatus.RUNNING and rejoin:  # ended while this one was fenced
        return Outcome(await load_summary(conn, record), False)
    if record.status != RunStatus.RUNNING:
        raise UserError(f"run {record.id}: {record.status}; nothing for a worker to do")
    snap = record.config
    # --concurrency: this worker's own; else its share of the run's among the live workers
    shared = opts.concurrency is None
    total = int(opts.concurrency or snap.get("concurrency") or cfg.settings.concurrency)
    # the run's cap, shared by its workers — not this worker's own config's
    cap = snap.get("budget_usd")
    cfg = cfg.model_copy(update={"settings": cfg.settings.model_copy(
        update={"budget_usd": cap})})
    explicit_gateway = opts.gateway
    opts = dataclasses.replace(opts, gateway=opts.gateway or pinned_gateway(snap),
                               model=opts.model or snap.get("model"),
                               concurrency=total)  # the pool fits the run
    grace = cfg.settings.store.unwritable_grace_s
    async with RunLifecycle(conn, db_target, cfg, opts, run_id, show_progress=show_progress,
                            whole_run=False) as life:
        _refuse_in_one_process(life.setup)
        if not explicit_gateway:
            _same_canary(life.setup, run_id, snap)
        claim = take_lock(db_target, f"{run_id}.worker.{os.getpid()}")
        life.holds(claim)
        worker = f"{claim.host}:{claim.pid}"
        fence = LeaseFence(run_id, worker, claim.token, lease_seconds())
        runner = await life.prepare([])
        runner.feeding = True
        assert life.sidecars is not None
        budget = None if cap is None else SharedBudget(runner, run_id, worker, float(cap),
                                                      fence.lease_s, life.sidecars.ops.page)
        await join_run(conn, run_id, worker, claim.token, claim.host, claim.pid)

        @contextlib.asynccontextmanager
        async def lease_feed(runner: SwarmRunner) -> AsyncIterator[None]:
            # leases on a connection of their own: the writer's flush holds a transaction
            # on `conn`, and a lease is a transaction too
            leases = await open_db(db_target, create=False, reconcile=False)
            feeder = asyncio.create_task(feeding(
                leases, runner, fence, run_id, worker, total, shared=shared,
                expected=int(snap.get("workers") or 1), budget=budget, grace_s=grace,
                target=db_target))
            feeder.add_done_callback(lambda t: _feed_ended(t, runner))
            try:
                yield
            finally:
                try:
                    await cancel_and_wait(feeder)
                finally:
                    await leases.close()

        stopped_by = await life.execute(runner, started="worker_started",
                                        detail=f'{{"worker": "{worker}"}}', fence=fence,
                                        beside=lease_feed)
    writer = life.writer
    assert writer is not None
    if writer.failure == LOST_CLAIM and not writer.unsaved and not runner.cancelled:
        raise LeaseTaken(writer.error or "lease taken")
    if writer.failure:
        raise UserError(writer.failure_line())
    ended = False  # this worker ended the run: it pages the run's end, once
    if runner.cancelled:
        ended = await cancel_split_run(conn, run_id)
    elif runner.stop_reason == BUDGET_STOPPED:
        ended = await budget_stop_run(conn, run_id, fence.lease_s)
    last_out = not runner.cancelled and await finish_run(conn, run_id)
    if last_out:
        await refresh_stats(conn, "results", "attempts")
    summary = await load_summary(conn, await get_run(conn, run_id, db_target))
    if last_out:  # the run's stored summary, as a one-process run saves its own
        await save_summary(conn, summary)
    if ended or last_out:
        await _page_the_end(conn, cfg, summary, cap)
        await keep_replay(conn, run_id, db_target)  # after its end's alerts are in its log
    return Outcome(summary, stopped_by is not None, stopped_by == signal.SIGHUP)


async def _page_the_end(conn: StoreConnection, cfg: LoadedConfig, summary: RunSummary,
                        cap: float | None) -> None:
    """The run's end alert (and its stop at the cap), from the worker that ended it; the
    deliveries' outcomes go into the run's log as any run's do."""
    alerts = []
    unsent = summary.unfinished + summary.cancelled
    if summary.status == RunStatus.BUDGET_STOPPED and cap is not None:
        alerts.append(Alert(AlertKind.BUDGET_STOP, f"budget cap ${cap:.4f} reached: the run's "
                            f"workers stopped dispatch, {unsent} tasks unsent (resumable)",
                            summary.run_id, details={"spent_usd": summary.cost_usd,
                                                     "cap_usd": cap, "unsent": unsent}))
    counts = {"succeeded": summary.succeeded, "failed": summary.failed,
              "cancelled": summary.cancelled}
    alerts.append(end_alert_of(summary.run_id, summary.status, counts, summary.total,
                               summary.cost_usd))
    lines: list[str] = []
    await page_once(cfg.settings, alerts, lines.append)
    await log_events(conn, summary.run_id, "control", lines)

