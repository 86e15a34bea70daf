"""Command line: sub-commands, one-line errors, documented exit codes (see README)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from swarm_tui import __version__
from swarm_tui.config import format_validation_error, load_config
from swarm_tui.errors import EXIT_INTERNAL, EXIT_OK, EXIT_SLA_BREACHED, UserError
from swarm_tui.gateway.keys import redact

EXIT_INTERRUPTED = 130


def run_async(coro):
    """asyncio.run on uvloop where available: less loop overhead per call on 2 cores."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="PATH", help="config file (env SWARM_TUI_CONFIG)")
    p.add_argument("--db", metavar="PATH", help="SQLite database (env SWARM_TUI_DB)")


def _sim_flags(p: argparse.ArgumentParser, prefix: str = "") -> None:
    p.add_argument(f"--{prefix}profile", default="gateway",
                   help="latency profile: gateway, direct, fixed:<ms> (default gateway)")
    p.add_argument(f"--{prefix}rate-429", type=float, help="fraction answered 429 + Retry-After")
    p.add_argument(f"--{prefix}rate-503", type=float, help="fraction answered 503")
    p.add_argument(f"--{prefix}rate-cut", type=float, default=0.0, help="fraction of streams cut")
    p.add_argument(f"--{prefix}rate-hang", type=float, default=0.0,
                   help="fraction that never answer (past the client timeout)")
    p.add_argument(f"--{prefix}rpm-per-key", type=int, help="requests per minute per key")
    p.add_argument(f"--{prefix}seed", type=int, help="random seed for reproducible runs")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm-tui", description="Terminal operations console for LLM agent swarms.")
    parser.add_argument("--version", action="version", version=f"swarm-tui {__version__}")
    _common(parser)
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="run a workload (or --demo N) against a gateway")
    _common(run)
    run.add_argument("workload", nargs="?", help="JSON Lines file, one task per line")
    run.add_argument("--demo", type=int, metavar="N", help="N demo tasks (the team's shape)")
    run.add_argument("--gateway", metavar="NAME", help="configured gateway, or 'sim'")
    run.add_argument("--concurrency", type=int, metavar="N", help="calls in flight (default 100)")
    run.add_argument("--model", help="model for tasks that do not name one")
    run.add_argument("--name", help="a name for the run")
    run.add_argument("--headless", action="store_true", help="no console: progress + summary")
    run.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    run.add_argument("--quiet", action="store_true", help="no progress output")
    run.add_argument("--no-stream", action="store_true", help="non-streaming calls")
    run.add_argument("--no-preflight", action="store_true",
                     help="skip the GET /models check of the gateway and keys")
    run.add_argument("--skip-bad-lines", action="store_true",
                     help="run the valid lines of a workload that has bad ones")
    run.add_argument("--insecure-key-file", action="store_true",
                     help="accept a key file readable by group/others (warns)")
    run.add_argument("--transport", choices=["aiohttp", "httpx2"], default="aiohttp",
                     help="HTTP transport under the SDK (default aiohttp: less CPU per call)")
    run.add_argument("--seed", type=int, help="seed for retry jitter")
    _sim_flags(run, "sim-")

    sim = sub.add_parser("sim", help="serve the simulator gateway for any OpenAI client")
    _common(sim)
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", type=int, default=8787)
    _sim_flags(sim)
    sim.add_argument("--keys-file", type=Path,
                     help="accept only these keys (one per line); default any Bearer key")
    sim.add_argument("--usage", choices=["final", "inline", "none"], default="final",
                     help="how streamed usage is reported")
    sim.add_argument("--chunks", type=int, default=6, help="content chunks per streamed answer")
    sim.add_argument("--cached-fraction", type=float, default=0.0,
                     help="share of prompt tokens reported as cached")
    sim.add_argument("--stdin-control", action="store_true", help=argparse.SUPPRESS)
    return parser


def _sim_settings(args: argparse.Namespace, prefix: str = ""):
    from swarm_tui.sim.settings import SimSettings

    def get(name: str):
        return getattr(args, prefix + name)

    fields = {
        "profile": get("profile"), "rate_429": get("rate_429"), "rate_503": get("rate_503"),
        "rate_cut": get("rate_cut"), "rate_hang": get("rate_hang"),
        "rpm_per_key": get("rpm_per_key"), "seed": get("seed"),
    }
    if not prefix:
        fields.update(usage_mode=args.usage, chunks=args.chunks,
                      cached_fraction=args.cached_fraction)
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


def _load_tasks(args: argparse.Namespace):
    from swarm_tui.workload import demo_tasks, parse_workload

    if (args.workload is None) == (args.demo is None):
        raise UserError("run: give a workload file or --demo N (one of them)")
    if args.demo is not None:
        if args.demo < 1:
            raise UserError("--demo N: N must be at least 1")
        return demo_tasks(args.demo)
    path = Path(args.workload)
    tasks, bad = parse_workload(path)
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


def cmd_run(args: argparse.Namespace) -> int:
    from swarm_tui.session import RunOptions

    cfg = load_config(args.config)
    tasks = _load_tasks(args)
    if args.concurrency is not None and args.concurrency < 1:
        raise UserError("--concurrency: must be at least 1")
    opts = RunOptions(
        gateway=args.gateway, concurrency=args.concurrency,
        stream=False if args.no_stream else None, model=args.model,
        sim=_sim_settings(args, "sim_"), preflight=not args.no_preflight,
        insecure_key_file=args.insecure_key_file, transport=args.transport, seed=args.seed,
        name=args.name,
    )
    if args.insecure_key_file:
        print("swarm-tui: warning: accepting key files readable by group/others",
              file=sys.stderr)
    return run_async(_run_headless(cfg, opts, tasks, args))


async def _run_headless(cfg, opts, tasks, args: argparse.Namespace) -> int:
    from swarm_tui.headless import run_with_progress, summary_text
    from swarm_tui.session import RunSession

    session = RunSession(cfg, opts)
    try:
        session.open()
        await session.preflight()
        runner = session.make_runner(tasks)
        run_id = time.strftime("%Y%m%d-%H%M%S-") + os.urandom(2).hex()
        interrupted = await run_with_progress(runner, show=not args.quiet)
        status = "cancelled" if runner.cancelled else "finished"
        summary = session.summary(run_id, status)
    finally:
        await session.aclose()
    if args.json:
        print(summary.model_dump_json(indent=2))
    else:
        print(summary_text(summary))
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if summary.sla is not None and summary.sla.met else EXIT_SLA_BREACHED


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_OK
    handlers = {"run": cmd_run, "sim": cmd_sim}
    try:
        return handlers[args.command](args)
    except UserError as e:
        print(f"swarm-tui: error: {redact(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("swarm-tui: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # last resort: one line, no traceback, no secret
        if os.environ.get("SWARM_TUI_DEBUG"):
            raise
        print(f"swarm-tui: internal error: {type(e).__name__}: {redact(str(e))} "
              "(set SWARM_TUI_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_INTERNAL
