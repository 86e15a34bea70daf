"""The console's commands: bare `swarm-tui`, `watch`, `serve` and `replay` — each parser
beside its handler."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import TYPE_CHECKING

from swarm_tui.cli.flags import (
    DEMO_CONSOLE_S,
    DEMO_CONSOLE_TASKS,
    common_flags,
    console_flags,
    demo_pace,
    metrics_flags,
    port_number,
)
from swarm_tui.cli.shared import config_of, open_console, opts_from_args, run_async, with_db
from swarm_tui.errors import EXIT_INTERNAL, EXIT_OK, UserError

if TYPE_CHECKING:
    from swarm_tui.store.conn import StoreConnection
    from swarm_tui.store.target import DbTarget


def cmd_console(args: argparse.Namespace) -> int:
    """Bare `swarm-tui`: the console; offers the demo swarm (key d) on the simulator."""
    from swarm_tui.run_sources import LiveSource
    from swarm_tui.store.db import resolve_db_target
    from swarm_tui.workload import Workload

    cfg = config_of(args)
    db = resolve_db_target(args.db)
    opts = opts_from_args(args, preflight_default=True)

    def start_demo() -> LiveSource:
        from dataclasses import replace  # not at import: `--help` builds no records

        demo_opts = replace(opts, max_calls_per_s=demo_pace(DEMO_CONSOLE_TASKS),
                            incidents=cfg.simulated_only)
        return LiveSource(cfg, demo_opts, Workload.demo(DEMO_CONSOLE_TASKS), db,
                          readonly=args.readonly)

    where = "the built-in simulator (SIMULATED)" if cfg.simulated_only else "the default gateway"
    return open_console(args, cfg, start_source=None if args.readonly else start_demo, db_target=db,
                    idle_message="press D (or :demo) to start the demo swarm "
                    f"({DEMO_CONSOLE_TASKS:,} tasks, 100 agents, ~{DEMO_CONSOLE_S:.0f} s) "
                    f"on {where}; h for stored runs, ? for help")


def add_watch(sub: argparse._SubParsersAction) -> None:
    watch = sub.add_parser("watch", help="attach the console to a run another process executes")
    common_flags(watch)
    watch.add_argument("run_id", nargs="?",
                       help="default: the newest running run; `last`: the newest run")
    watch.add_argument("--write", action="store_true",
                       help="allow pause / resume / cancel / concurrency through the store")
    watch.add_argument("--headless", action="store_true",
                       help="no console: follow the run to its end serving --metrics-port")
    metrics_flags(watch, "the watched run, counted from its stored rows")
    console_flags(watch)


def cmd_watch(args: argparse.Namespace) -> int:
    from swarm_tui.run_sources import StoreSource
    from swarm_tui.store.db import resolve_db_target
    from swarm_tui.store.target import missing_file

    if args.headless and args.metrics_port is None:
        raise UserError("watch --headless: nothing to do without --metrics-port (the "
                        "console is the other way to watch)")
    cfg = config_of(args)
    db = resolve_db_target(args.db)
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
        return open_console(args, cfg, source=StoreSource(db, probe.run_id,
                                                      write=not args.readonly, cfg=cfg),
                        db_target=db)
    from swarm_tui.commands.watch import follow_headless, metrics_for

    metrics, server = metrics_for(db, probe.run_id, probe.record.simulated, args.metrics_port,
                                  args.metrics_bind or "127.0.0.1")
    source = StoreSource(db, probe.run_id, write=not args.readonly, cfg=cfg, observer=metrics)
    try:
        if args.headless:
            run_async(follow_headless(source, metrics, server, args.metrics_linger or 0.0))
            return EXIT_OK
        return open_console(args, cfg, source=source, db_target=db)
    finally:
        server.close()


def add_serve(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="the console in a browser (textual-serve): watch a "
                           "run from a laptop through an SSH tunnel")
    common_flags(serve)
    serve.add_argument("run_id", nargs="?", help="default: the newest running run")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: reach it through "
                       "`ssh -L 8000:localhost:8000 HOST`; another address needs TLS)")
    serve.add_argument("--port", type=port_number, default=8000,
                       help="port (default 8000; with --socket, the tunnel's local port)")
    serve.add_argument("--socket", metavar="PATH",
                       help="listen on a Unix socket only you may connect to (mode 0600) "
                       "instead of a port: `ssh -L 8000:PATH HOST`")
    serve.add_argument("--token-file", metavar="PATH",
                       help="the login token from a file only you can read (default: a new "
                       "one each start, printed once as a URL)")
    serve.add_argument("--certfile", metavar="PEM", help="TLS certificate (with --keyfile)")
    serve.add_argument("--keyfile", metavar="PEM", help="TLS private key")
    serve.add_argument("--public-url", metavar="URL",
                       help="the address the browser uses (default http://HOST:PORT)")
    serve.add_argument("--write", action="store_true",
                       help="allow pause / resume / cancel / concurrency from the browser")
    console_flags(serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from swarm_tui.commands.serve import console_command, moment_command, serve
    from swarm_tui.run_sources import StoreSource
    from swarm_tui.store.db import resolve_db_target
    from swarm_tui.store.target import missing_file

    cfg = config_of(args)  # a bad config is one line here, not an error page in the browser
    db = resolve_db_target(args.db)
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


def add_replay(sub: argparse._SubParsersAction) -> None:
    replay = sub.add_parser("replay", help="a stored run as it was at one moment: the "
                            "console, or with --screenshot an SVG and a status block")
    common_flags(replay)
    console_flags(replay)
    replay.add_argument("run_id", help="a stored run (see `swarm-tui runs`), or `last`")
    replay.add_argument("--at", metavar="TIME", default="end",
                        help="14:03:20 / 2026-12-05T14:03:20Z, +2m30s, start, end (default), "
                        "first-failure, alert:KIND (e.g. alert:sla_breach), canary:ACTION")
    replay.add_argument("--screenshot", metavar="FILE.svg",
                        help="write the console at that moment to FILE.svg and print a "
                        "plain-text status block; headless, no terminal needed")
    replay.add_argument("--size", default="120x40", metavar="COLSxROWS",
                        help="the screenshot's terminal size (default 120x40)")


def cmd_replay(args: argparse.Namespace) -> int:
    """A stored run at one moment: the console there, or an SVG and a status block."""
    from swarm_tui.run_sources import StoreSource
    from swarm_tui.store.db import resolve_db_target
    from swarm_tui.store.target import missing_file

    cfg = config_of(args)
    db = resolve_db_target(args.db)
    if missing_file(db):
        raise UserError(f"database {db}: does not exist (no runs recorded yet)")
    run_id, at, started = run_async(with_db(args, _moment, args, create=False))
    source = StoreSource(db, run_id, at=at, cfg=cfg)
    if args.screenshot is None:
        args.readonly = True
        return open_console(args, cfg, source=source, db_target=db)
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
    shot, snap = screenshot(target, (cols, rows), source=source, refresh_s=0.1, db_target=db,
                            readonly=True, theme=args.theme or ui.theme, view=ui.view)
    if shot is None or snap is None:
        raise UserError(f"replay {run_id}: the console drew nothing to save", EXIT_INTERNAL)
    print(status_block(snap, at, started))
    print(f"screenshot: {shot}")
    return EXIT_OK


async def _moment(conn: StoreConnection, path: DbTarget, args: argparse.Namespace
                  ) -> tuple[str, float, float]:
    from swarm_tui.commands.replay import resolve_moment
    from swarm_tui.store.runs import get_run

    run = await get_run(conn, args.run_id, path)
    return run.id, await resolve_moment(conn, run, args.at), run.started_at
