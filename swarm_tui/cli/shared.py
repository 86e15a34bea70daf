"""What the handlers share: the config and run options from flags, the store opened with
one-line errors, a run's summary printed, and the console's start and end. Each brings
what it uses when called (`--help` imports none of it)."""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from swarm_tui.cli.exits import exit_code
from swarm_tui.cli.streams import say
from swarm_tui.core.terminal import draws
from swarm_tui.errors import EXIT_BUDGET_STOPPED, EXIT_INTERNAL, EXIT_OK, UserError

if TYPE_CHECKING:
    from swarm_tui.run.stored_run import Outcome
    from swarm_tui.run.wiring import RunOptions
    from swarm_tui.settings.loader import LoadedConfig
    from swarm_tui.sim.settings import SimSettings
    from swarm_tui.store.conn import StoreConnection
    from swarm_tui.store.target import DbTarget

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    from swarm_tui.aio import run_async as run

    return run(coro)


def brief_with_db(args: argparse.Namespace, fn: Callable[..., Awaitable[T]], *rest: Any,
                  create: bool = True) -> T:
    """A command that asks the store a few things and ends. A SQLite file: its statements
    on this thread (store/direct.py) and no event loop at all (aio.run_here); a server:
    plain asyncio."""
    from swarm_tui.aio import run_brief, run_here
    from swarm_tui.store.db import resolve_db_target
    from swarm_tui.store.target import PgTarget

    path = resolve_db_target(args.db)
    if isinstance(path, PgTarget):
        return run_brief(with_db(args, fn, *rest, create=create, path=path))
    return run_here(with_db(args, fn, *rest, create=create, direct=True, path=path))


def sim_settings(args: argparse.Namespace, prefix: str = "") -> SimSettings:
    from pydantic import ValidationError

    from swarm_tui.settings.sections import format_validation_error
    from swarm_tui.sim.settings import SimSettings

    def get(name: str) -> Any:
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


def config_of(args: argparse.Namespace) -> LoadedConfig:
    """The config with this command line's setting flags as its top layer (checked there:
    `--concurrency 0` is refused as the file's `concurrency = 0` would be)."""
    # here, not at the top: `runs`, `report`, `export` need no pydantic-settings
    from swarm_tui.settings.loader import FLAG_SETTINGS, load_config

    return load_config(args.config, {f: getattr(args, f, None) for f in FLAG_SETTINGS})


def opts_from_args(args: argparse.Namespace, preflight_default: bool = False,
                   **extra: Any) -> RunOptions:
    from swarm_tui.run.wiring import RunOptions

    insecure = getattr(args, "insecure_key_file", False)
    if insecure:
        print("swarm-tui: warning: accepting key files readable by group/others",
              file=sys.stderr)
    preflight = preflight_default or not getattr(args, "no_preflight", False)
    return RunOptions(preflight=preflight, insecure_key_file=insecure,
                      metrics_port=getattr(args, "metrics_port", None),
                      metrics_bind=getattr(args, "metrics_bind", None) or "127.0.0.1",
                      metrics_linger_s=getattr(args, "metrics_linger", None) or 0.0, **extra)


async def with_db(args: argparse.Namespace, fn: Callable[..., Awaitable[T]], *rest: Any,
                  create: bool = True, direct: bool = False, path: DbTarget | None = None
                  ) -> T:
    """Open the store (one-line errors), run `fn(conn, path, ...)`, always close."""
    from swarm_tui.store.db import db_error, open_db, resolve_db_target

    path = resolve_db_target(args.db) if path is None else path
    conn = await open_db(path, create=create, direct=direct)
    try:
        return await fn(conn, path, *rest)
    except sqlite3.Error as e:
        raise db_error(path, e) from None
    finally:
        await conn.close()


async def finish_stored(conn: StoreConnection, path: DbTarget, cfg: LoadedConfig,
                        outcome: Outcome, as_json: bool) -> int:
    from swarm_tui.commands import history
    from swarm_tui.settings.view import ConfigView

    text = (await history.summary_json(conn, path, outcome.summary, ConfigView.of(cfg))
            if as_json else None)
    return finish(outcome, as_json, text)


def finish(outcome: Outcome, as_json: bool, json_text: str | None = None) -> int:
    from swarm_tui.core.plain import to_json
    from swarm_tui.report.summary_text import summary_text

    summary = outcome.summary
    say(json_text or to_json(summary, indent=2) if as_json else summary_text(summary),
        summary.run_id)
    code = exit_code(outcome)
    if code == EXIT_BUDGET_STOPPED:
        unsent = summary.unfinished + summary.cancelled
        print(f"swarm-tui: stopped at the budget cap; {unsent} tasks unsent — raise it with "
              f"`swarm-tui resume {summary.run_id} --budget USD`", file=sys.stderr)
    return code


def interactive() -> bool:
    return sys.stdin.isatty() and draws(sys.stdout) and not os.environ.get("CI")


def open_console(args: argparse.Namespace, cfg: LoadedConfig, **kw: Any) -> int:
    from swarm_tui.commands.canary import canary_config
    from swarm_tui.settings.view import ConfigView
    from swarm_tui.ui.launch import run_console

    # with no gateways configured, the canary panel shows the simulator's demo canary
    canary = (canary_config(ConfigView.of(cfg)) if cfg.settings.canary or cfg.simulated_only
              else None)
    end = run_console(cfg, gateway=getattr(args, "gateway", None), readonly=args.readonly,
                      canary=canary, **kw)
    if end.failed:
        return EXIT_INTERNAL  # Textual itself failed (it printed why)
    if end.outcome is not None:
        from swarm_tui.report.summary_text import summary_text

        say(summary_text(end.outcome.summary), end.outcome.summary.run_id)
        return exit_code(end.outcome, console_code=end.code)
    return end.code or EXIT_OK
