"""Taking a stored run up again (`resume`): refuse what cannot be resumed, claim the run
before reading what to re-send (of two resumes exactly one gets past the claim), and hand
back the tasks without a stored result with what the run was configured with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swarm_tui.core.states import RunStatus
from swarm_tui.errors import UserError
from swarm_tui.run.stored_run import Resumed, pinned_gateway
from swarm_tui.sim.settings import SimSettings
from swarm_tui.store.claims import take_lock
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.runs import (
    RunRecord,
    claim_run,
    get_run,
    release_run,
    resumable_tasks,
    spent_usd,
)
from swarm_tui.store.target import DbTarget
from swarm_tui.workload import Workload


@dataclass
class ResumePlan:
    """A claimed run and what is left of it; `resumed` is None when every task has a
    stored result (the run was released again: nothing to send)."""

    run: RunRecord
    status: str                  # as it was found: interrupted, paused, budget_stopped…
    tasks: Workload
    resumed: Resumed | None
    snap: dict[str, Any]         # what the run was configured with (never a key)
    gateway: str | None          # the gateway its tasks all went to (None: a canary run)
    sim: SimSettings
    spent_usd: float             # what it already cost: its budget cap counts it


async def plan_resume(conn: StoreConnection, db_target: DbTarget, run_id: str) -> ResumePlan:
    """The run claimed (its lock and its row), or one clear UserError. The caller releases
    `plan.resumed.claim` once it has executed (or handed on) the run."""
    run = await get_run(conn, run_id, db_target)
    status = run.effective_status()
    if not run.workload_hash and status != RunStatus.RUNNING:
        raise UserError(f"run {run.id}: its creation stopped before all its tasks were "
                        "stored, so nothing was sent for it; start it again with `run`")
    if status == RunStatus.RUNNING:
        raise UserError(f"run {run.id}: still being executed by pid {run.pid} on {run.host} "
                        "(stopped or busy processes keep their run); resume it once that "
                        "process has ended")
    claim = take_lock(db_target, run.id)
    try:
        await claim_run(conn, await get_run(conn, run.id, db_target), claim, db_target)
        seqs, heads, prior = await resumable_tasks(conn, run.id)
        tasks = Workload.stored(heads)
        snap = run.config
        sim = SimSettings.model_validate(snap["sim"]) if "sim" in snap else SimSettings()
        if not tasks:
            await release_run(conn, run.id, status if status != "interrupted" else "finished",
                              claim)
            claim.release()
            return ResumePlan(await get_run(conn, run.id, db_target), status, tasks, None,
                              snap, pinned_gateway(snap), sim, 0.0)
        return ResumePlan(run, status, tasks, Resumed(run.id, seqs, prior, claim), snap,
                          pinned_gateway(snap), sim, await spent_usd(conn, run.id))
    except BaseException:
        claim.release()
        raise
