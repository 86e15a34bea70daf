"""The command line's face: the parser assembled from each command's module, the handler
table, and one line (never a traceback) for whatever goes wrong."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from swarm_tui import __version__
from swarm_tui.cli import admin, consoles, run, stored
from swarm_tui.cli.flags import common_flags, console_flags
from swarm_tui.cli.shared import interactive
from swarm_tui.cli.streams import StdoutError, TerminalStream, speak_utf8, stdout_to_null
from swarm_tui.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, UserError
from swarm_tui.gateway.keys import redact


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm-tui", description="Terminal operations console for LLM agent swarms. "
        "Without a sub-command: the console (built-in simulator when nothing is configured).")
    parser.add_argument("--version", action="version", version=f"swarm-tui {__version__}")
    common_flags(parser, top=True)
    console_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command")
    run.add_run(sub)
    consoles.add_watch(sub)
    consoles.add_serve(sub)
    run.add_resume(sub)
    consoles.add_replay(sub)
    run.add_worker(sub)
    admin.add_completion(sub)
    admin.add_db(sub)
    stored.add_runs(sub)
    stored.add_report(sub)
    stored.add_cost(sub)
    stored.add_export(sub)
    admin.add_canary(sub)
    admin.add_keys(sub)
    admin.add_sim(sub)
    return parser


HANDLERS: dict[str | None, Callable[[argparse.Namespace], int]] = {
    "run": run.cmd_run,
    "watch": consoles.cmd_watch,
    "serve": consoles.cmd_serve,
    "resume": run.cmd_resume,
    "replay": consoles.cmd_replay,
    "worker": run.cmd_worker,
    "completion": admin.cmd_completion,
    "db": admin.cmd_db,
    "runs": stored.cmd_runs,
    "report": stored.cmd_report,
    "cost": stored.cmd_cost,
    "export": stored.cmd_export,
    "canary": admin.cmd_canary,
    "keys": admin.cmd_keys,
    "sim": admin.cmd_sim,
    None: consoles.cmd_console,  # bare `swarm-tui`: the console
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (and nothing runs)
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    if args.command is None and not interactive():
        parser.print_help()  # the console needs a terminal
        return EXIT_OK
    speak_utf8()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = TerminalStream(stdout, True), TerminalStream(stderr, False)
    try:
        return HANDLERS[args.command](args)
    except UserError as e:
        print(f"swarm-tui: error: {' '.join(redact(str(e)).split())}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("swarm-tui: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `swarm-tui export … | head`: the reader left, not an error
        stdout_to_null()
        return EXIT_OK
    except StdoutError as e:  # `report last > full-disk/r.txt`
        stdout_to_null()
        print(f"swarm-tui: error: standard output: cannot write ({e.strerror})",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:
        return _internal(e)
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def _internal(e: Exception) -> int:
    """The last resort: one line, no traceback, no secret."""
    if os.environ.get("SWARM_TUI_DEBUG"):
        raise e
    print(f"swarm-tui: internal error: {type(e).__name__}: {redact(str(e))} "
          "(set SWARM_TUI_DEBUG=1 for a traceback)", file=sys.stderr)
    return EXIT_INTERNAL
