"""Run a swarm with its results stored: shared by `run` and `resume`."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from swarm_tui.canary.controller import CanaryController
from swarm_tui.config import LoadedConfig
from swarm_tui.engine.events import CONTROL, Consumer
from swarm_tui.engine.runner import SwarmRunner
from swarm_tui.engine.state import RunStatus
from swarm_tui.engine.summary import RunSummary
from swarm_tui.errors import UserError
from swarm_tui.execution.companions import Companions
from swarm_tui.execution.progress import run_with_progress
from swarm_tui.execution.wiring import RunOptions, RunSession
from swarm_tui.redact import without_userinfo
from swarm_tui.runtime import collector_for_a_run
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.ownership import Claim, take_lock
from swarm_tui.store.runs import create_run, get_run, load_summary, refresh_stats, save_summary
from swarm_tui.store.target import DbTarget
from swarm_tui.store.task_bodies import StoredBodies
from swarm_tui.store.writer import StoreWriter
from swarm_tui.workload import Task, Workload


@dataclass
class Outcome:
    summary: RunSummary
    interrupted: bool


def config_snapshot(session: RunSession, opts: RunOptions) -> dict[str, Any]:
    """What a run was configured with — names, URLs and fingerprints, never a key."""
    gateways = {
        name: {"base_url": without_userinfo(gw.base_url),
               "keys": [k.fingerprint for k in gw.keys],
               "stream": gw.stream, "pinned_model": gw.pinned_model}
        for name, gw in session.gateways.items()
    }
    snap: dict[str, Any] = {
        "settings": session.cfg.settings.model_dump(mode="json"),
        "config_path": str(session.cfg.path) if session.cfg.path else None,
        "gateway": session.gateway_name, "concurrency": session.concurrency,
        "model": opts.model, "stream": opts.stream, "gateways": gateways,
        "budget_usd": (opts.budget_usd if opts.budget_usd is not None
                       else session.cfg.settings.budget_usd),
        # a canary run routes by the stored canary: `gateway` above is only its baseline
        "canary": session.canary.name if session.canary is not None else None,
    }
    if session.simulated:
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
    conn: StoreConnection, db_path: DbTarget, cfg: LoadedConfig, opts: RunOptions,
    tasks: Workload | Sequence[Task], run_id: str, *, show_progress: bool,
    seqs: list[int] | None = None, prior_attempts: list[int] | None = None,
    claim: Claim | None = None, consumers: Iterable[Consumer] = (),
    on_start: Callable[[SwarmRunner, RunSession, CanaryController | None], None] | None = None,
) -> Outcome:
    """Build the session, store the run, run it, and return the summary read back from
    the store, so `run` and `report` print the same figures for the same run.

    The engine holds each task's head only: a new run's rows are written from a second
    pass over the workload, and every prompt is read back from the store at its send.

    A resume passes the `claim` it took before reading what to re-send; a new run takes
    its own. Results the store could not take end the command with exit 2 (one line
    naming the cause and the journal), never with exit 0."""
    # every result goes to the store: the runner need not keep the answers in memory
    session = RunSession(cfg, dataclasses.replace(opts, keep_answers=False))
    workload = tasks if isinstance(tasks, Workload) else Workload.of(tasks)
    bodies = StoredBodies(db_path, run_id, cfg.settings.store.unwritable_grace_s)
    writer: StoreWriter | None = None
    companions: Companions | None = None
    try:
        companions = Companions(session, db_path, run_id, show_progress)
        ops = companions.ops
        session.open()
        warnings = await session.preflight()
        if show_progress:
            for w in warnings:
                print(f"swarm-tui: warning: {w}", file=sys.stderr)
        canary = await companions.open_canary()
        runner = session.make_runner(workload.heads, consumers, seqs=seqs,
                                     prior_attempts=prior_attempts, bodies=bodies)
        if claim is None:
            claim = take_lock(db_path, run_id)
            await create_run(conn, run_id, runner.agents,
                             (session.forced_model(t) for t in workload), name=opts.name,
                             simulated=session.simulated,
                             config=config_snapshot(session, opts), claim=claim)
        async with collector_for_a_run():
            writer = StoreWriter(conn, db_path, run_id, runner, claim=claim,
                                 grace_s=cfg.settings.store.unwritable_grace_s)
            writer.log_event("session_started", None)
            for w in warnings:  # into the run's log too (the console shows it)
                runner.emit(CONTROL, detail=f"preflight: {w}")
            writer.start()
            await companions.start(runner)
            if on_start is not None:
                on_start(runner, session, canary)
            try:
                interrupted = await run_with_progress(runner, show=show_progress)
            finally:
                if runner.consumer_errors:  # metrics, alerts or traces missed events
                    print(f"swarm-tui: warning: {runner.consumer_errors} events were not "
                          f"taken by a consumer (first: {runner.consumer_error})",
                          file=sys.stderr)
                status = (RunStatus.UNSAVED if writer.failure else RunStatus.CANCELLED
                          if runner.cancelled else runner.stop_reason or RunStatus.FINISHED)
                # its end alert and deliveries: in the run's events
                await companions.stop(status)
                await writer.close(RunStatus.CANCELLED if runner.cancelled
                                   else runner.stop_reason or "finished")
        if ops.server is not None and opts.metrics_linger_s > 0:
            if show_progress:
                print(f"swarm-tui: run ended; final metrics on :{ops.server.port}/metrics "
                      f"until scraped (at most {opts.metrics_linger_s:.0f} s)", file=sys.stderr)
            await ops.linger(opts.metrics_linger_s)
    finally:
        await bodies.aclose()
        if claim is not None:
            claim.release()  # the writer released it already unless we failed before it
        if companions is not None:
            await companions.close()
        await session.aclose()
    if writer.failure:
        raise UserError(writer.failure_line())
    await refresh_stats(conn, "results", "attempts")
    summary = await load_summary(conn, await get_run(conn, run_id, db_path))
    await save_summary(conn, summary)
    return Outcome(summary, interrupted)
