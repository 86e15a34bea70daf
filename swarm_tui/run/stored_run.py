"""Run a swarm with its results stored: shared by `run` and `resume`."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sqlite3
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from swarm_tui.core.events import Consumer
from swarm_tui.core.states import RunStatus
from swarm_tui.core.summary import RunSummary
from swarm_tui.errors import UserError
from swarm_tui.redact import without_userinfo
from swarm_tui.report.history import load_summary
from swarm_tui.run.lifecycle import OnStart, RunLifecycle
from swarm_tui.run.wiring import RunOptions, RunSetup
from swarm_tui.settings.loader import LoadedConfig
from swarm_tui.store.claims import Claim, take_lock
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.runs import (
    create_run,
    get_run,
    get_settled_run,
    refresh_stats,
    save_summary,
    wall_ms_so_far,
)
from swarm_tui.store.target import DbTarget
from swarm_tui.workload import Task, Workload


@dataclass
class Outcome:
    summary: RunSummary
    interrupted: bool
    hung_up: bool = False  # its terminal hung up (SIGHUP): cancelled cleanly, exit 129


def config_snapshot(setup: RunSetup, opts: RunOptions) -> dict[str, Any]:
    """What a run was configured with — names, URLs and fingerprints, never a key."""
    gateways = {
        name: {"base_url": without_userinfo(gw.base_url),
               "keys": [k.fingerprint for k in gw.keys],
               "stream": gw.stream, "pinned_model": gw.pinned_model}
        for name, gw in setup.gateways.items()
    }
    snap: dict[str, Any] = {
        "settings": setup.cfg.settings.model_dump(mode="json"),
        "config_path": str(setup.cfg.path) if setup.cfg.path else None,
        "gateway": setup.gateway_name, "concurrency": setup.concurrency,
        "model": opts.model, "stream": opts.stream, "gateways": gateways,
        "budget_usd": (opts.budget_usd if opts.budget_usd is not None
                       else setup.cfg.settings.budget_usd),
        # a canary run routes by the stored canary: `gateway` above is only its baseline
        "canary": setup.canary.name if setup.canary is not None else None,
    }
    if setup.simulated:
        snap["sim"] = opts.sim.model_dump(mode="json", exclude={"keys"})
    return snap


@dataclass(frozen=True)
class Resumed:
    """A stored run taken up again: its id, the tasks still to send (by seq), their
    earlier attempts, and the claim taken before they were read."""

    run_id: str
    seqs: list[int]
    prior_attempts: list[int]
    claim: Claim


def pinned_gateway(snap: dict[str, Any]) -> str | None:
    """The gateway a stored run's tasks all went to; None for a canary run, whose later
    sessions (a resume, a worker) split by the stored canary as its first did."""
    return None if snap.get("canary") else snap.get("gateway")


async def execute(
    conn: StoreConnection, db_target: DbTarget, cfg: LoadedConfig, opts: RunOptions,
    tasks: Workload | Sequence[Task], run_id: str, *, show_progress: bool,
    seqs: list[int] | None = None, prior_attempts: list[int] | None = None,
    claim: Claim | None = None, consumers: Iterable[Consumer] = (),
    on_start: OnStart | None = None, warn_on_stderr: bool = True,
) -> Outcome:
    """Build the setup, store the run, run it, and return the summary read back from
    the store, so `run` and `report` print the same figures for the same run.

    The engine holds each task's head only: a new run's rows are written from a second
    pass over the workload, and every prompt is read back from the store at its send.

    A resume passes the `claim` it took before reading what to re-send; a new run takes
    its own. Results the store could not take end the command with exit 2 (one line
    naming the cause and the journal), never with exit 0."""
    outcome = await _execute(conn, db_target, cfg, opts, tasks, run_id,
                             show_progress=show_progress, seqs=seqs,
                             prior_attempts=prior_attempts, claim=claim, consumers=consumers,
                             on_start=on_start, warn_on_stderr=warn_on_stderr)
    # the run's engine is gone with _execute's frame (its task records and the runner
    # point at each other: a collection frees them), so the timeline is built in the
    # memory they held — the run's peak RSS is not raised by it
    if not outcome.interrupted:  # a Ctrl-C leaves at once (its first replay builds it)
        gc.collect()
        await keep_replay(conn, run_id, db_target)
    return outcome


async def _execute(
    conn: StoreConnection, db_target: DbTarget, cfg: LoadedConfig, opts: RunOptions,
    tasks: Workload | Sequence[Task], run_id: str, *, show_progress: bool,
    seqs: list[int] | None, prior_attempts: list[int] | None, claim: Claim | None,
    consumers: Iterable[Consumer], on_start: OnStart | None, warn_on_stderr: bool,
) -> Outcome:
    workload = tasks if isinstance(tasks, Workload) else Workload.of(tasks)
    async with RunLifecycle(conn, db_target, cfg, opts, run_id, show_progress=show_progress,
                            warn_on_stderr=warn_on_stderr) as life:
        if claim is not None:  # a resume's, taken before it read what to re-send
            life.holds(claim)
        runner = await life.prepare(workload.heads, consumers, seqs=seqs,
                                    prior_attempts=prior_attempts)
        setup = life.setup
        if claim is None:
            claim = take_lock(db_target, run_id)
            life.holds(claim)
            await create_run(conn, run_id, runner.records,
                             (setup.forced_model(t) for t in workload), name=opts.name,
                             simulated=setup.simulated,
                             config=config_snapshot(setup, opts), claim=claim)
        stopped_by = await life.execute(runner, started="session_started", on_start=on_start)
        ops = life.sidecars.ops if life.sidecars is not None else None
        if ops is not None and ops.server is not None and opts.metrics_linger_s > 0:
            if show_progress:
                print(f"swarm-tui: run ended; final metrics on :{ops.server.port}/metrics "
                      f"until scraped (at most {opts.metrics_linger_s:.0f} s)", file=sys.stderr)
            await ops.linger(opts.metrics_linger_s)
    writer = life.writer
    assert writer is not None
    if writer.failure:
        raise UserError(writer.failure_line())
    await refresh_stats(conn, "results", "attempts")
    summary = await load_summary(conn, await get_run(conn, run_id, db_target))
    await save_summary(conn, summary)
    return Outcome(summary, stopped_by is not None, stopped_by == signal.SIGHUP)


async def keep_replay(conn: StoreConnection, run_id: str, db_target: DbTarget) -> None:
    """The run's replay timeline and cost breakdown stored now that it has ended
    (replay/timeline.py, store/cost_index.py): ~15 µs a task here, so a page's link to any
    moment of it opens at once, and its `report` sums nothing again.

    The run is stored and summarised already: a Ctrl-C or SIGTERM now skips the save (the
    first replay builds it) instead of ending a finished run as `interrupted`, exit 130,
    with no summary printed."""
    from swarm_tui.replay.timeline import keep_timeline
    from swarm_tui.report.cost import run_cost_groups

    async def save() -> None:
        try:
            run, status = await get_settled_run(conn, run_id, db_target)
            if status != RunStatus.RUNNING and run.finished_at is not None:
                await keep_timeline(conn, run_id, run.started_at, run.finished_at)
                # and its cost breakdown: the first `report` of it reads one row too
                await run_cost_groups(conn, run, await wall_ms_so_far(conn, run))
        except sqlite3.Error:
            # the run and its summary are stored; the timeline only saves a replay its
            # build (a store that failed just now: the first replay builds it from the rows)
            pass

    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(save())
    skipped = False

    def skip() -> None:
        nonlocal skipped
        skipped = True
        task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, skip)
    try:
        await task
    except asyncio.CancelledError:
        if not skipped:
            raise  # this coroutine itself was cancelled, not the save skipped
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
