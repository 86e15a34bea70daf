"""Command line: the sub-command handlers, one-line errors, and the one exit-code table.

The grammar (options, help) is cli_parser.py; the stored-run verbs are commands/history.py,
keys and canary commands/keys.py and commands/canary.py. What stays here is what `run`,
`resume`, `watch` and the bare console share: building run options from flags, the
console's start and its ending (exit_code) — ~440 lines, kept together for that.
"""

from __future__ import annotations

import argparse
import functools
import os
import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from swarm_tui.cli_parser import (
    DEMO_CONSOLE_S,
    DEMO_CONSOLE_TASKS,
    DEMO_HEADLESS_TASKS,
    build_parser,
)
from swarm_tui.errors import (
    EXIT_BUDGET_STOPPED,
    EXIT_HANGUP,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SLA_BREACHED,
    UserError,
)
from swarm_tui.gateway.keys import redact

if TYPE_CHECKING:
    from swarm_tui.config import LoadedConfig
    from swarm_tui.execution.stored_run import Outcome

# Imported by every command, so it imports almost nothing itself: each handler brings
# what it uses (`--help` and the stored-run verbs paid for the engine, pydantic and a
# database driver they never touched — issue 34).


def run_async(coro):
    from swarm_tui.aio import run_async as run

    return run(coro)



def exit_code(outcome: Outcome, console_code: int | None = None) -> int:
    """The one exit-code table (README, Exit codes) for every way a run ends: headless,
    or a console that was quit, hung up on, or left after the run ended."""
    from swarm_tui.engine.state import RunStatus

    if console_code == EXIT_HANGUP:
        return EXIT_HANGUP
    summary = outcome.summary
    if (console_code == EXIT_INTERRUPTED or outcome.interrupted
            or summary.status == RunStatus.CANCELLED):
        return EXIT_INTERRUPTED
    if summary.status == RunStatus.BUDGET_STOPPED:
        return EXIT_BUDGET_STOPPED
    if summary.sla is not None and (summary.sla.met or summary.sla.inconclusive):
        return EXIT_OK  # inconclusive: latency over the SLA while the client was the limit
    return EXIT_SLA_BREACHED


def _sim_settings(args: argparse.Namespace, prefix: str = ""):
    from pydantic import ValidationError

    from swarm_tui.config_sections import format_validation_error
    from swarm_tui.sim.settings import SimSettings

    def get(name: str):
        return getattr(args, prefix + name)

    fields = {
        "profile": get("profile"), "rate_429": get("rate_429"), "rate_503": get("rate_503"),
        "rate_cut": get("rate_cut"), "rate_hang": get("rate_hang"),
        "rpm_per_key": get("rpm_per_key"), "seed": get("seed"),
        "quota_burst": get("quota_burst"),
    }
    model_429 = {}
    for item in get("model_429"):
        model, _, rate = item.partition("=")
        try:
            model_429[model] = float(rate)
        except ValueError:
            raise UserError(f"--{prefix.replace('_', '-')}model-429 {item}: expected "
                            "MODEL=RATE") from None
    fields["model_429"] = model_429
    if not prefix:
        fields.update(usage_mode=args.usage, usage_style=args.usage_style, chunks=args.chunks,
                      cached_fraction=args.cached_fraction,
                      rate_stream_error=args.rate_stream_error,
                      stream_error_code=args.stream_error_code,
                      rate_malformed=args.rate_malformed, ignore_stream=args.ignore_stream,
                      prompt_counting=args.prompt_counting)
        if args.keys_file:
            from swarm_tui.gateway.keys import read_key_file
            fields["keys"] = [k for k, _ in read_key_file(args.keys_file, insecure=True)]
    flag = "--" + prefix
    try:
        return SimSettings(**fields)
    except ValidationError as e:
        raise UserError(format_validation_error(f"simulator flags ({flag}…)", e)) from None


def cmd_sim(args: argparse.Namespace) -> int:
    from swarm_tui.sim.server import serve_child, serve_forever

    if args.stdin_control:  # a child of `run` / the console: settings arrive on stdin
        serve_child()
        return EXIT_OK
    settings = _sim_settings(args)
    try:
        serve_forever(settings, args.host, args.port)
    except OSError as e:
        raise UserError(f"simulator {args.host}:{args.port}: cannot listen: {e.strerror}") from None
    return EXIT_OK


def _load_tasks(args: argparse.Namespace, console: bool = False):
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


def _config(args: argparse.Namespace) -> LoadedConfig:
    """The config with this command line's setting flags as its top layer (checked there:
    `--concurrency 0` is refused as the file's `concurrency = 0` would be)."""
    # here, not at the top: `runs`, `report`, `export` need no pydantic-settings
    from swarm_tui.config import FLAG_SETTINGS, load_config

    return load_config(args.config, {f: getattr(args, f, None) for f in FLAG_SETTINGS})


def _opts_from_args(args: argparse.Namespace, preflight_default: bool = False, **extra):
    from swarm_tui.execution.wiring import RunOptions

    insecure = getattr(args, "insecure_key_file", False)
    if insecure:
        print("swarm-tui: warning: accepting key files readable by group/others",
              file=sys.stderr)
    preflight = preflight_default or not getattr(args, "no_preflight", False)
    return RunOptions(preflight=preflight, insecure_key_file=insecure,
                      metrics_port=getattr(args, "metrics_port", None),
                      metrics_bind=getattr(args, "metrics_bind", None) or "127.0.0.1",
                      metrics_linger_s=getattr(args, "metrics_linger", None) or 0.0, **extra)


async def _retrying(read, grace_s: float):
    """`read()` again while the store fails (a server restarting), for up to `grace_s`."""
    import asyncio
    import time

    deadline = time.monotonic() + grace_s
    wait = 0.25
    while True:
        try:
            return await read()
        except sqlite3.Error:
            if time.monotonic() + wait > deadline:
                raise
            await asyncio.sleep(wait)
            wait = min(wait * 2, 4.0)


async def _finish_stored(conn, path, cfg, outcome, as_json: bool) -> int:
    from swarm_tui.commands import history

    text = await history.summary_json(conn, path, outcome.summary, cfg) if as_json else None
    return _finish(outcome, as_json, text)


def _finish(outcome, as_json: bool, json_text: str | None = None) -> int:
    from swarm_tui.report.summary_text import summary_text

    summary = outcome.summary
    if as_json:
        print(json_text or summary.model_dump_json(indent=2))
    else:
        print(summary_text(summary))
    code = exit_code(outcome)
    if code == EXIT_BUDGET_STOPPED:
        unsent = summary.unfinished + summary.cancelled
        print(f"swarm-tui: stopped at the budget cap; {unsent} tasks unsent — raise it with "
              f"`swarm-tui resume {summary.run_id} --budget USD`", file=sys.stderr)
    return code


def demo_pace(n_tasks: int) -> float:
    """The console demo's pace: its tasks spread over ~DEMO_CONSOLE_S seconds, so there is
    a swarm to watch (unpaced, 100 tasks are over in about a second)."""
    return max(1.0, n_tasks / DEMO_CONSOLE_S)


def cmd_run(args: argparse.Namespace) -> int:
    cfg = _config(args)
    console = not args.headless and not args.json and _interactive()
    tasks = _load_tasks(args, console)
    if args.rate is not None and args.rate < 0:
        raise UserError("--rate: calls per second, 0 or more")
    rate = args.rate or None
    incidents = bool(args.sim_incidents)
    if console and args.demo is not None and args.sim_incidents is None:
        incidents = cfg.simulated_only or args.gateway == "sim"
        if args.rate is None:
            rate = demo_pace(len(tasks))
    opts = _opts_from_args(
        args, gateway=args.gateway, stream=False if args.no_stream else None, model=args.model,
        sim=_sim_settings(args, "sim_"), transport=args.transport, seed=args.seed,
        name=args.name, canary_demo=args.canary_demo, max_calls_per_s=rate,
        incidents=incidents)
    if args.workers is not None:
        if args.workers < 1:
            raise UserError("--workers: 1 or more worker processes")
        if args.metrics_port is not None:  # N workers cannot share one port
            raise UserError("--metrics-port with --workers: each worker serves its own "
                            "(`swarm-tui worker RUN_ID --metrics-port P`); `swarm-tui watch "
                            "RUN_ID --headless --metrics-port P` serves the whole run")
        return run_async(_with_db(args, _run_workers, cfg, opts, tasks, args))
    if console:
        from swarm_tui.run_sources import LiveSource
        from swarm_tui.store.db import resolve_db_path

        db = resolve_db_path(args.db)
        source = LiveSource(cfg, opts, tasks, db, readonly=args.readonly)
        return _console(args, cfg, source=source, db_path=db)
    return run_async(_with_db(args, _run, cfg, opts, tasks, args))


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty() and not os.environ.get("CI")


def _console(args: argparse.Namespace, cfg, **kw) -> int:
    from swarm_tui.ui.app import SwarmApp

    ui = cfg.settings.ui
    theme = ui.theme  # `--theme` is the config's top layer
    if theme is None and not cfg.simulated_only:
        gw = cfg.settings.gateways.get(getattr(args, "gateway", None)
                                       or cfg.settings.default_gateway or "")
        theme = gw.theme if gw else None
    from swarm_tui.ui.themes import load_themes_reporting

    known, problems = load_themes_reporting()  # a bad user theme is skipped and said
    for line in problems:
        print(f"swarm-tui: warning: {line}", file=sys.stderr)
    if theme is not None and theme not in known:
        raise UserError(f"theme {theme}: unknown (known: {', '.join(sorted(known))})")
    from swarm_tui.commands.canary import canary_config

    # with no gateways configured, the canary panel shows the simulator's demo canary
    canary = canary_config(cfg) if cfg.settings.canary or cfg.simulated_only else None
    from swarm_tui.runtime import tune_gc

    tune_gc()  # the console's key presses wait on the collector's walks otherwise
    app = SwarmApp(refresh_s=ui.refresh_s, theme=theme, keymap=ui.keys, view=ui.view,
                   readonly=args.readonly, canary=canary, **kw)
    code = app.run()
    if code is None and app.return_code not in (None, 0):
        return EXIT_INTERNAL  # Textual itself failed (it printed why)
    source = kw.get("source") or app.source
    err = getattr(source, "error", None)
    if err:
        raise UserError(err)
    outcome = getattr(source, "outcome", None)
    if outcome is not None:
        from swarm_tui.report.summary_text import summary_text

        print(summary_text(outcome.summary))
        return exit_code(outcome, console_code=code)
    return code or EXIT_OK


def cmd_console(args: argparse.Namespace) -> int:
    """Bare `swarm-tui`: the console; offers the demo swarm (key d) on the simulator."""
    from swarm_tui.run_sources import LiveSource
    from swarm_tui.store.db import resolve_db_path
    from swarm_tui.workload import Workload

    cfg = _config(args)
    db = resolve_db_path(args.db)
    opts = _opts_from_args(args, preflight_default=True)

    def start_demo() -> LiveSource:
        demo_opts = replace(opts, max_calls_per_s=demo_pace(DEMO_CONSOLE_TASKS),
                            incidents=cfg.simulated_only)
        return LiveSource(cfg, demo_opts, Workload.demo(DEMO_CONSOLE_TASKS), db,
                          readonly=args.readonly)

    where = "the built-in simulator (SIMULATED)" if cfg.simulated_only else "the default gateway"
    return _console(args, cfg, start_source=None if args.readonly else start_demo, db_path=db,
                    idle_message="press D (or :demo) to start the demo swarm "
                    f"({DEMO_CONSOLE_TASKS:,} tasks, 100 agents, ~{DEMO_CONSOLE_S:.0f} s) "
                    f"on {where}; h for stored runs, ? for help")


def cmd_watch(args: argparse.Namespace) -> int:
    from swarm_tui.run_sources import StoreSource
    from swarm_tui.store.db import resolve_db_path
    from swarm_tui.store.target import missing_file

    if args.headless and args.metrics_port is None:
        raise UserError("watch --headless: nothing to do without --metrics-port (the "
                        "console is the other way to watch)")
    cfg = _config(args)
    db = resolve_db_path(args.db)
    if missing_file(db):
        raise UserError(f"database {db}: does not exist (no runs recorded yet)")
    # Resolve the run (and any database error) before the console starts, so a bad id or
    # file is one line and an exit code; the console then opens its own connection.
    probe = StoreSource(db, args.run_id)
    run_async(probe.open())
    run_async(probe.close())
    assert probe.run_id is not None and probe.record is not None
    args.readonly = args.readonly or not args.write
    if args.metrics_port is None:
        return _console(args, cfg, source=StoreSource(db, probe.run_id,
                                                      write=not args.readonly, cfg=cfg),
                        db_path=db)
    from swarm_tui.commands.watch import follow_headless, metrics_for

    metrics, server = metrics_for(db, probe.run_id, probe.record.simulated, args.metrics_port,
                                  args.metrics_bind or "127.0.0.1")
    source = StoreSource(db, probe.run_id, write=not args.readonly, cfg=cfg, observer=metrics)
    try:
        if args.headless:
            run_async(follow_headless(source, metrics, server, args.metrics_linger or 0.0))
            return EXIT_OK
        return _console(args, cfg, source=source, db_path=db)
    finally:
        server.close()


def cmd_serve(args: argparse.Namespace) -> int:
    from swarm_tui.commands.serve import console_command, moment_command, serve
    from swarm_tui.run_sources import StoreSource
    from swarm_tui.store.db import resolve_db_path
    from swarm_tui.store.target import missing_file

    cfg = _config(args)  # a bad config is one line here, not an error page in the browser
    db = resolve_db_path(args.db)
    if missing_file(db):
        raise UserError(f"database {db}: does not exist (no runs recorded yet)")
    probe = StoreSource(db, args.run_id)  # a bad id or file: one line, before serving
    run_async(probe.open())
    run_async(probe.close())
    write = args.write and not args.readonly
    theme = getattr(args, "theme", None)
    serve(console_command(db, args.config, probe.run_id if args.run_id else None,
                          write, theme), args.host, args.port, write,
          moment=functools.partial(moment_command, db, args.config, theme),
          socket=args.socket, token_file=args.token_file, certfile=args.certfile,
          keyfile=args.keyfile,
          # the address alerts link to is the one to print, unless told otherwise
          public_url=args.public_url or cfg.settings.alerts.console_url)
    return EXIT_OK


async def _with_db(args: argparse.Namespace, fn, *rest, create: bool = True):
    """Open the store (one-line errors), run `fn(conn, path, ...)`, always close."""
    from swarm_tui.store.db import db_error, open_db, resolve_db_path

    path = resolve_db_path(args.db)
    conn = await open_db(path, create=create)
    try:
        return await fn(conn, path, *rest)
    except sqlite3.Error as e:
        raise db_error(path, e) from None
    finally:
        await conn.close()


async def _run(conn, path, cfg, opts, tasks, args) -> int:
    from swarm_tui.execution.stored_run import execute
    from swarm_tui.store.runs import new_run_id

    outcome = await execute(conn, path, cfg, opts, tasks, new_run_id(),
                            show_progress=not args.quiet)
    return await _finish_stored(conn, path, cfg, outcome, args.json)


async def _run_workers(conn, path, cfg, opts, tasks, args) -> int:
    """`run --workers N`: store the run split into batches, start N `worker` processes
    on this host, wait for them, and print the run's summary as `run` does."""
    import asyncio
    import subprocess

    from swarm_tui.engine.state import RunStatus
    from swarm_tui.execution.stored_run import Outcome
    from swarm_tui.execution.workers import prepare
    from swarm_tui.store.runs import get_run, load_summary, new_run_id

    run_id = new_run_id()
    batches = await prepare(conn, path, cfg, opts, tasks, run_id, args.workers)
    if not args.quiet:
        print(f"swarm-tui: run {run_id}: {len(tasks)} tasks in {batches} batches, "
              f"{args.workers} workers", file=sys.stderr)
    argv = [sys.executable, "-m", "swarm_tui", "worker", run_id, "--quiet",
            "--transport", args.transport]
    if args.db:
        argv += ["--db", args.db]  # never a password (refused on the command line)
    if args.config:
        argv += ["--config", args.config]
    if args.no_preflight:
        argv.append("--no-preflight")
    procs = [await asyncio.create_subprocess_exec(*argv, stdin=subprocess.DEVNULL,
                                                  stdout=subprocess.DEVNULL)
             for _ in range(args.workers)]
    # the starter and its workers are one unit: a signal to the starter reaches every
    # worker (each cancels cleanly, its tasks resumable) and the starter waits for them
    # (a SIGINT to the starter alone exited it and left both workers running)
    signalled = _forward_signals(procs)
    try:
        codes = [await p.wait() for p in procs]
    finally:
        signalled.close()
    from swarm_tui.store.reconcile import import_worker_journals

    async def read_back():
        for warning in await import_worker_journals(conn, path, run_id):
            print(f"swarm-tui: warning: {warning}", file=sys.stderr)
        return await load_summary(conn, await get_run(conn, run_id, path))

    # the run is done; a store restarting right now is waited for, for the store's grace
    summary = await _retrying(read_back, cfg.settings.store.unwritable_grace_s)
    failed = [c for c in codes if c not in (EXIT_OK, EXIT_SLA_BREACHED, EXIT_BUDGET_STOPPED)]
    if failed:
        print(f"swarm-tui: {len(failed)} of {args.workers} workers failed (exit "
              f"{', '.join(map(str, failed))}); `swarm-tui worker {run_id}` finishes the run",
              file=sys.stderr)
    # a worker that died is no failure of a run the others finished (its batches were
    # leased again): exit as the run ended
    interrupted = (bool(failed) or signalled.got) and summary.status != RunStatus.FINISHED
    return await _finish_stored(conn, path, cfg, Outcome(summary, interrupted), args.json)


class _Forwarded:
    """Signal handlers that pass SIGINT / SIGTERM / SIGHUP on to worker processes."""

    def __init__(self, loop, sigs: tuple[int, ...]) -> None:
        self.loop, self.sigs, self.got = loop, sigs, False

    def close(self) -> None:
        import contextlib

        for sig in self.sigs:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                self.loop.remove_signal_handler(sig)


def _forward_signals(procs) -> _Forwarded:
    import asyncio
    import contextlib
    import signal

    loop = asyncio.get_running_loop()
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    fwd = _Forwarded(loop, sigs)

    def forward(sig: int) -> None:
        fwd.got = True
        # a hang-up ends a worker as a SIGTERM does (its default would kill it mid-write)
        to = signal.SIGTERM if sig == signal.SIGHUP else sig
        for p in procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(to)

    for sig in sigs:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, forward, sig)
    return fwd


def cmd_db(args: argparse.Namespace) -> int:
    from swarm_tui.commands import db

    if args.db_command == "copy":  # SRC, DST: as --db (a password in a URL is refused)
        return run_async(db.copy(args))
    return run_async(db.init(args))


def cmd_worker(args: argparse.Namespace) -> int:
    cfg = _config(args)
    opts = _opts_from_args(args, concurrency=args.concurrency, transport=args.transport)
    return run_async(_with_db(args, _worker, cfg, opts, args, create=False))


async def _worker(conn, path, cfg, opts, args) -> int:
    from swarm_tui.execution.workers import work_to_the_end
    from swarm_tui.store.leases import newest_split_run

    run_id = args.run_id or await newest_split_run(conn, path)
    outcome = await work_to_the_end(conn, path, cfg, opts, run_id,
                                    show_progress=not args.quiet)
    return await _finish_stored(conn, path, cfg, outcome, args.json)


def cmd_replay(args: argparse.Namespace) -> int:
    """A stored run at one moment: the console there, or an SVG and a status block."""
    from swarm_tui.run_sources import StoreSource
    from swarm_tui.store.db import resolve_db_path
    from swarm_tui.store.target import missing_file

    cfg = _config(args)
    db = resolve_db_path(args.db)
    if missing_file(db):
        raise UserError(f"database {db}: does not exist (no runs recorded yet)")
    run_id, at, started = run_async(_with_db(args, _moment, args, create=False))
    source = StoreSource(db, run_id, at=at, cfg=cfg)
    if args.screenshot is None:
        args.readonly = True
        return _console(args, cfg, source=source, db_path=db)
    from swarm_tui.commands.replay import status_block
    from swarm_tui.ui.screenshot import screenshot

    try:
        cols, rows = (int(x) for x in args.size.lower().split("x"))
    except ValueError:
        raise UserError(f"--size {args.size}: COLSxROWS, e.g. 120x40") from None
    target = Path(args.screenshot)
    if not target.parent.is_dir():
        raise UserError(f"--screenshot {target}: no such directory {target.parent}")
    ui = cfg.settings.ui
    shot, snap = screenshot(target, (cols, rows), source=source, refresh_s=0.1, db_path=db,
                            readonly=True, theme=args.theme or ui.theme, view=ui.view)
    if shot is None or snap is None:
        raise UserError(f"replay {run_id}: the console drew nothing to save", EXIT_INTERNAL)
    print(status_block(snap, at, started))
    print(f"screenshot: {shot}")
    return EXIT_OK


async def _moment(conn, path, args: argparse.Namespace) -> tuple[str, float, float]:
    from swarm_tui.commands.replay import resolve_moment
    from swarm_tui.store.runs import get_run

    run = await get_run(conn, args.run_id, path)
    return run.id, await resolve_moment(conn, run, args.at), run.started_at


def cmd_resume(args: argparse.Namespace) -> int:
    console = not args.headless and not args.json and _interactive()
    result = run_async(_with_db(args, _resume, args, console, create=False))
    if isinstance(result, int):
        return result
    # on a terminal the resumed run is watched live, as `run` is; the claim taken before
    # reading what to re-send stays held until the console has ended it
    from swarm_tui.run_sources import LiveSource
    from swarm_tui.store.db import resolve_db_path

    cfg, opts, tasks, resumed = result
    try:
        db = resolve_db_path(args.db)
        source = LiveSource(cfg, opts, tasks, db, readonly=args.readonly, resume=resumed)
        return _console(args, cfg, source=source, db_path=db)
    finally:
        resumed.claim.release()


async def _resume(conn, path, args: argparse.Namespace, console: bool = False):
    """Resume headless and return the exit code; with `console`, hand back what the
    console needs to execute it (the claim still held)."""
    from swarm_tui.engine.state import RunStatus
    from swarm_tui.execution.stored_run import Outcome, Resumed, execute, pinned_gateway
    from swarm_tui.sim.settings import SimSettings
    from swarm_tui.store.ownership import Claim, take_lock
    from swarm_tui.store.runs import (
        claim_run,
        get_run,
        load_summary,
        release_run,
        resumable_tasks,
        spent_usd,
    )
    from swarm_tui.workload import Workload

    run = await get_run(conn, args.run_id, path)
    status = run.effective_status()
    if not run.workload_hash and status != RunStatus.RUNNING:
        raise UserError(f"run {run.id}: its creation stopped before all its tasks were "
                        "stored, so nothing was sent for it; start it again with `run`")
    if status == RunStatus.RUNNING:
        raise UserError(f"run {run.id}: still being executed by pid {run.pid} on {run.host} "
                        "(stopped or busy processes keep their run); resume it once that "
                        "process has ended")
    # Own the run before reading what to re-send: of two resumes, exactly one gets here.
    claim = take_lock(path, run.id)
    held: Claim | None = claim  # None once handed to the console
    try:
        await claim_run(conn, await get_run(conn, run.id, path), claim, path)
        seqs, heads, prior = await resumable_tasks(conn, run.id)
        tasks = Workload.stored(heads)
        if not tasks:
            await release_run(conn, run.id, status if status != "interrupted" else "finished",
                              claim)
            print(f"run {run.id}: nothing to resume, every task has a stored result",
                  file=sys.stderr)
            run = await get_run(conn, run.id, path)
            return await _finish_stored(conn, path, _config(args),
                                        Outcome(await load_summary(conn, run), False), args.json)
        snap = run.config
        cfg = _config(args)
        gateway = pinned_gateway(snap)
        sim = SimSettings.model_validate(snap["sim"]) if "sim" in snap else SimSettings()
        # the stored run's figures, unless a flag (the config's top layer) names new ones
        budget = cfg.settings.budget_usd if args.budget is not None else snap.get("budget_usd")
        concurrency = (cfg.settings.concurrency if args.concurrency is not None
                       else snap.get("concurrency"))
        spent = await spent_usd(conn, run.id)
        opts = _opts_from_args(args, gateway=gateway, stream=snap.get("stream"),
                               model=snap.get("model"), sim=sim, name=run.name,
                               budget_usd=budget, spent_before_usd=spent,
                               concurrency=concurrency)
        print(f"swarm-tui: resuming run {run.id} ({status}): {len(tasks)} of {run.total} tasks "
              "have no stored result", file=sys.stderr)
        if console:
            held = None  # released by the console's caller
            return cfg, opts, tasks, Resumed(run.id, seqs, prior, claim)
        outcome = await execute(conn, path, cfg, opts, tasks, run.id,
                                show_progress=not args.quiet, seqs=seqs, prior_attempts=prior,
                                claim=claim)
    finally:
        if held is not None:
            held.release()
    return await _finish_stored(conn, path, cfg, outcome, args.json)


def cmd_runs(args: argparse.Namespace) -> int:
    from swarm_tui.store.db import resolve_db_path
    from swarm_tui.store.target import missing_file

    db = resolve_db_path(args.db)
    if missing_file(db):
        if args.db or os.environ.get("SWARM_TUI_DB"):  # a path you named: a typo is no
            # empty store (it read "no runs recorded yet", exit 0)
            raise UserError(f"database {db}: does not exist (check --db / SWARM_TUI_DB)")
        print("[]" if args.json else "no runs recorded yet")
        return EXIT_OK
    from swarm_tui.commands import history

    return run_async(_with_db(args, history.runs, args, create=False))


def cmd_report(args: argparse.Namespace) -> int:
    from swarm_tui.commands import history

    return run_async(_with_db(args, history.report, args, create=False))


def cmd_cost(args: argparse.Namespace) -> int:
    from swarm_tui.commands import history

    return run_async(_with_db(args, history.cost, args, create=False))


def cmd_export(args: argparse.Namespace) -> int:
    from swarm_tui.commands import history

    return run_async(_with_db(args, history.export, args, create=False))


def cmd_canary(args: argparse.Namespace) -> int:
    from swarm_tui.commands import canary

    cfg = _config(args)
    canary.canary_config(cfg)  # no canary configured: say so before touching the database
    return run_async(_with_db(args, canary.run, cfg, args))


def cmd_keys(args: argparse.Namespace) -> int:
    from swarm_tui.commands import keys

    cfg = _config(args)
    if args.insecure_key_file:
        print("swarm-tui: warning: accepting key files readable by group/others",
              file=sys.stderr)
    if args.readonly and args.verb in ("add", "retire", "enable"):
        raise UserError(f"keys {args.verb}: refused, --readonly")
    if args.verb == "add":  # a file operation: no database needed
        if args.fingerprint is not None:  # never echo it: it may be the key itself
            raise UserError("keys add: the key is read from standard input or --from-env VAR, "
                            "never from the command line (shell history, ps)")
        return keys.run_add(cfg, args)
    return run_async(_with_db(args, keys.run, cfg, args))


def cmd_completion(args: argparse.Namespace) -> int:
    import argcomplete

    print(argcomplete.shellcode(["swarm-tui"], shell=args.shell))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (and nothing runs)
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    if args.command is None and not _interactive():
        parser.print_help()  # the console needs a terminal
        return EXIT_OK
    handlers = {"run": cmd_run, "sim": cmd_sim, "resume": cmd_resume, "runs": cmd_runs,
                "report": cmd_report, "export": cmd_export, "watch": cmd_watch,
                "canary": cmd_canary, "keys": cmd_keys, "cost": cmd_cost, "serve": cmd_serve,
                "worker": cmd_worker, "db": cmd_db, "completion": cmd_completion,
                "replay": cmd_replay,
                None: cmd_console}
    try:
        return handlers[args.command](args)
    except UserError as e:
        print(f"swarm-tui: error: {' '.join(redact(str(e)).split())}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("swarm-tui: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `swarm-tui export … | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as e:  # last resort: one line, no traceback, no secret
        if os.environ.get("SWARM_TUI_DEBUG"):
            raise
        print(f"swarm-tui: internal error: {type(e).__name__}: {redact(str(e))} "
              "(set SWARM_TUI_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_INTERNAL
