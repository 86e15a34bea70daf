"""`run`, `resume` and `worker`: a run executed here, taken up again, or joined — each
parser beside its handler."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from swarm_tui.cli.flags import (
    DEMO_CONSOLE_S,
    DEMO_CONSOLE_TASKS,
    DEMO_HEADLESS_TASKS,
    common_flags,
    console_flags,
    demo_pace,
    execution_flags,
    sim_flags,
)
from swarm_tui.cli.shared import (
    config_of,
    finish_stored,
    interactive,
    open_console,
    opts_from_args,
    run_async,
    sim_settings,
    with_db,
)
from swarm_tui.errors import UserError

if TYPE_CHECKING:
    from swarm_tui.run.stored_run import Resumed
    from swarm_tui.run.wiring import RunOptions
    from swarm_tui.settings.loader import LoadedConfig
    from swarm_tui.store.claims import Claim
    from swarm_tui.store.conn import StoreConnection
    from swarm_tui.store.target import DbTarget
    from swarm_tui.workload import Workload


def add_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run a workload (or --demo N) against a gateway")
    common_flags(run)
    run.add_argument("workload", nargs="?", help="JSON Lines file, one task per line")
    run.add_argument("--demo", type=int, nargs="?", const=0, metavar="N",
                     help="N demo tasks of the team's shape on the simulator (default: "
                     f"{DEMO_CONSOLE_TASKS:,} paced over ~{DEMO_CONSOLE_S:.0f} s with scripted "
                     f"incidents in the console, {DEMO_HEADLESS_TASKS} at once headless)")
    run.add_argument("--rate", type=float, metavar="CALLS_PER_S",
                     help="open-loop pace: start at most this many calls per second "
                     "(default: unpaced; 0 unpaces the console demo)")
    run.add_argument("--gateway", metavar="NAME", help="configured gateway, or 'sim'")
    run.add_argument("--concurrency", type=int, metavar="N", help="calls in flight (default 100)")
    run.add_argument("--model", help="model for tasks that do not name one")
    run.add_argument("--name", help="a name for the run")
    execution_flags(run)
    run.add_argument("--no-stream", action="store_true", help="non-streaming calls")
    run.add_argument("--skip-bad-lines", action="store_true",
                     help="run the valid lines of a workload that has bad ones")
    run.add_argument("--transport", choices=["wire", "aiohttp", "httpx2"], default="wire",
                     help="wire (default): the chat-completions protocol straight on aiohttp, "
                     "the least CPU per call; aiohttp / httpx2: through the openai SDK on "
                     "that transport (the reference path)")
    run.add_argument("--seed", type=int, help="seed for retry jitter")
    run.add_argument("--canary-demo", action="store_true",
                     help="simulated canary: baseline on the 'direct' profile, candidate on "
                     "--sim-profile, auto mode with 30 s bakes (key g in the console)")
    run.add_argument("--budget", type=float, metavar="USD",
                     help="per-run cost cap: warn at 80 %%, stop dispatch at the cap (exit 4)")
    run.add_argument("--workers", type=int, metavar="N",
                     help="split the run into batches leased by N worker processes on this "
                     "host (more join with `swarm-tui worker` from any host on the same "
                     "PostgreSQL); needs a gateway every worker reaches")
    run.add_argument("--sim-incidents", action=argparse.BooleanOptionalAction, default=None,
                     help="the demo's scripted trouble on the simulator: kimi-k2.5 streams "
                     "break (retries, fallbacks), 429s cool a key down (on in the console demo)")
    sim_flags(run, "sim-")
    console_flags(run)


def cmd_run(args: argparse.Namespace) -> int:
    cfg = config_of(args)
    console = not args.headless and not args.json and interactive()
    tasks = _load_tasks(args, console)
    if args.rate is not None and args.rate < 0:
        raise UserError("--rate: calls per second, 0 or more")
    rate = args.rate or None
    incidents = bool(args.sim_incidents)
    if console and args.demo is not None and args.sim_incidents is None:
        incidents = cfg.simulated_only or args.gateway == "sim"
        if args.rate is None:
            rate = demo_pace(len(tasks))
    opts = opts_from_args(
        args, gateway=args.gateway, stream=False if args.no_stream else None, model=args.model,
        sim=sim_settings(args, "sim_"), transport=args.transport, seed=args.seed,
        name=args.name, canary_demo=args.canary_demo, max_calls_per_s=rate,
        incidents=incidents)
    if args.workers is not None:
        if args.workers < 1:
            raise UserError("--workers: 1 or more worker processes")
        if args.metrics_port is not None:  # N workers cannot share one port
            raise UserError("--metrics-port with --workers: each worker serves its own "
                            "(`swarm-tui worker RUN_ID --metrics-port P`); `swarm-tui watch "
                            "RUN_ID --headless --metrics-port P` serves the whole run")
        return run_async(with_db(args, _run_workers, cfg, opts, tasks, args))
    if console:
        from swarm_tui.run_sources import LiveSource
        from swarm_tui.store.db import resolve_db_target

        db = resolve_db_target(args.db)
        source = LiveSource(cfg, opts, tasks, db, readonly=args.readonly)
        return open_console(args, cfg, source=source, db_target=db)
    return run_async(with_db(args, _run, cfg, opts, tasks, args))


def _load_tasks(args: argparse.Namespace, console: bool = False) -> Workload:
    from swarm_tui.workload import Workload

    if (args.workload is None) == (args.demo is None):
        raise UserError("run: give a workload file or --demo N (one of them)")
    if args.demo is not None:
        if args.demo < 0:
            raise UserError("--demo N: N must be at least 1")
        return Workload.demo(args.demo or (DEMO_CONSOLE_TASKS if console
                                           else DEMO_HEADLESS_TASKS))
    path = Path(args.workload)
    tasks = Workload.from_file(path)  # checked whole here; read again as the run is stored
    bad = tasks.bad
    for b in bad[:20]:
        print(f"swarm-tui: {b}", file=sys.stderr)
    if len(bad) > 20:
        print(f"swarm-tui: … and {len(bad) - 20} more bad lines", file=sys.stderr)
    if bad and not args.skip_bad_lines:
        raise UserError(f"workload {path}: {len(bad)} bad line(s), nothing sent "
                        "(fix them or pass --skip-bad-lines)")
    if bad:
        print(f"swarm-tui: skipping {len(bad)} bad line(s), running {len(tasks)}",
              file=sys.stderr)
    if not tasks:
        raise UserError(f"workload {path}: no tasks")
    return tasks


async def _run(conn: StoreConnection, path: DbTarget, cfg: LoadedConfig, opts: RunOptions,
               tasks: Workload, args: argparse.Namespace) -> int:
    from swarm_tui.run.stored_run import execute
    from swarm_tui.store.runs import new_run_id

    outcome = await execute(conn, path, cfg, opts, tasks, new_run_id(),
                            show_progress=not args.quiet)
    return await finish_stored(conn, path, cfg, outcome, args.json)


async def _run_workers(conn: StoreConnection, path: DbTarget, cfg: LoadedConfig,
                       opts: RunOptions, tasks: Workload, args: argparse.Namespace) -> int:
    """`run --workers N`: store the run split into batches, start N `worker` processes
    on this host, wait for them, and print the run's summary as `run` does."""
    from swarm_tui.run.starter import run_with_workers
    from swarm_tui.store.runs import new_run_id

    argv = ["--quiet", "--transport", args.transport]
    if args.db:
        argv += ["--db", args.db]  # never a password (refused on the command line)
    if args.config:
        argv += ["--config", args.config]
    if args.no_preflight:
        argv.append("--no-preflight")
    outcome = await run_with_workers(conn, path, cfg, opts, tasks, new_run_id(), args.workers,
                                     argv, show_progress=not args.quiet)
    return await finish_stored(conn, path, cfg, outcome, args.json)


def add_resume(sub: argparse._SubParsersAction) -> None:
    resume = sub.add_parser("resume", help="finish an interrupted run: re-send only tasks "
                            "without a stored result, under the same run id (on a terminal "
                            "in the console, as run; otherwise headless)")
    common_flags(resume)
    console_flags(resume)
    resume.add_argument("run_id", help="the interrupted run (see `swarm-tui runs`), or `last`")
    resume.add_argument("--concurrency", type=int, metavar="N",
                        help="calls in flight (default: the run's own)")
    execution_flags(resume)
    resume.add_argument("--budget", type=float, metavar="USD",
                        help="cost cap for the whole run (what it already cost counts)")


def cmd_resume(args: argparse.Namespace) -> int:
    console = not args.headless and not args.json and interactive()
    result = run_async(with_db(args, _resume, args, console, create=False))
    if isinstance(result, int):
        return result
    # on a terminal the resumed run is watched live, as `run` is; the claim taken before
    # reading what to re-send stays held until the console has ended it
    from swarm_tui.run_sources import LiveSource
    from swarm_tui.store.db import resolve_db_target

    cfg, opts, tasks, resumed = result
    try:
        db = resolve_db_target(args.db)
        source = LiveSource(cfg, opts, tasks, db, readonly=args.readonly, resume=resumed)
        return open_console(args, cfg, source=source, db_target=db)
    finally:
        resumed.claim.release()


async def _resume(conn: StoreConnection, path: DbTarget, args: argparse.Namespace,
                  console: bool = False
                  ) -> int | tuple[LoadedConfig, RunOptions, Workload, Resumed]:
    """Resume headless and return the exit code; with `console`, hand back what the
    console needs to execute it (the claim still held)."""
    from swarm_tui.report.history import load_summary
    from swarm_tui.run.resume import plan_resume
    from swarm_tui.run.stored_run import Outcome, execute

    plan = await plan_resume(conn, path, args.run_id)
    run = plan.run
    if plan.resumed is None:
        print(f"run {run.id}: nothing to resume, every task has a stored result",
              file=sys.stderr)
        return await finish_stored(conn, path, config_of(args),
                                   Outcome(await load_summary(conn, run), False), args.json)
    held: Claim | None = plan.resumed.claim  # None once handed to the console
    try:
        cfg = config_of(args)
        snap = plan.snap
        # the stored run's figures, unless a flag (the config's top layer) names new ones
        budget = cfg.settings.budget_usd if args.budget is not None else snap.get("budget_usd")
        concurrency = (cfg.settings.concurrency if args.concurrency is not None
                       else snap.get("concurrency"))
        opts = opts_from_args(args, gateway=plan.gateway, stream=snap.get("stream"),
                               model=snap.get("model"), sim=plan.sim, name=run.name,
                               budget_usd=budget, spent_before_usd=plan.spent_usd,
                               concurrency=concurrency)
        print(f"swarm-tui: resuming run {run.id} ({plan.status}): {len(plan.tasks)} of "
              f"{run.total} tasks have no stored result", file=sys.stderr)
        if console:
            held = None  # released by the console's caller
            return cfg, opts, plan.tasks, plan.resumed
        outcome = await execute(conn, path, cfg, opts, plan.tasks, run.id,
                                show_progress=not args.quiet, seqs=plan.resumed.seqs,
                                prior_attempts=plan.resumed.prior_attempts,
                                claim=plan.resumed.claim)
    finally:
        if held is not None:
            held.release()
    return await finish_stored(conn, path, cfg, outcome, args.json)


def add_worker(sub: argparse._SubParsersAction) -> None:
    worker = sub.add_parser("worker", help="join a run started with --workers: lease its "
                            "batches and execute them, until every batch is done")
    common_flags(worker)
    worker.add_argument("run_id", nargs="?",
                        help="default: the newest running run split into batches")
    worker.add_argument("--concurrency", type=int, metavar="N",
                        help="this worker's calls in flight (default: its share of the "
                        "run's, among the workers alive)")
    worker.add_argument("--transport", choices=["wire", "aiohttp", "httpx2"],
                        default="wire", help="as run's --transport")
    execution_flags(worker)


def cmd_worker(args: argparse.Namespace) -> int:
    cfg = config_of(args)
    opts = opts_from_args(args, concurrency=args.concurrency, transport=args.transport)
    return run_async(with_db(args, _worker, cfg, opts, args, create=False))


async def _worker(conn: StoreConnection, path: DbTarget, cfg: LoadedConfig, opts: RunOptions,
                  args: argparse.Namespace) -> int:
    from swarm_tui.run.workers import work_to_the_end
    from swarm_tui.store.leases import newest_split_run

    run_id = args.run_id or await newest_split_run(conn, path)
    outcome = await work_to_the_end(conn, path, cfg, opts, run_id,
                                    show_progress=not args.quiet)
    return await finish_stored(conn, path, cfg, outcome, args.json)
