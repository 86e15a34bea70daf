"""The command line's face: the parser assembled from each command's module, the handler
table, and one line (never a traceback) for whatever goes wrong."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from swarm_tui import __version__
from swarm_tui.cli import collector
from swarm_tui.cli.flags import common_flags, console_flags
from swarm_tui.cli.shared import interactive
from swarm_tui.cli.streams import StdoutError, TerminalStream, speak_utf8, stdout_to_null
from swarm_tui.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, UserError

# Each command's word and the module of cli/ that holds its parser (`add_WORD`) and its
# handler (`cmd_WORD`), in the order `--help` lists them. A command builds only its own
# parser (the whole tree is ~190 options, ~5 ms of every start) and imports only its own
# module (issue 34).
PARSERS: dict[str, str] = {
    "run": "run",
    "watch": "consoles",
    "serve": "consoles",
    "resume": "run",
    "replay": "consoles",
    "worker": "run",
    "completion": "admin",
    "db": "admin",
    "runs": "stored",
    "report": "stored",
    "cost": "stored",
    "export": "stored",
    "canary": "admin",
    "keys": "admin",
    "sim": "admin",
}


def _of(word: str | None, kind: str) -> Any:
    """A command's `add_` or `cmd_` function (bare `swarm-tui`: the console's handler)."""
    module = __import__(f"swarm_tui.cli.{PARSERS.get(word or '', 'consoles')}",
                        fromlist=["_"])
    return getattr(module, f"{kind}_{word or 'console'}")


def _columns() -> int:
    """What `shutil.get_terminal_size().columns` answers, without importing shutil."""
    with contextlib.suppress(KeyError, ValueError):
        if (env := int(os.environ["COLUMNS"])) > 0:
            return env
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class _Parser(argparse.ArgumentParser):
    """argparse builds a help formatter at every `add_argument` (to check the metavar), and
    the formatter imports shutil (with bz2 and lzma: ~2 ms of a reading command's start)
    to learn the terminal's width: it is told the width instead (issue 34)."""

    def _get_formatter(self) -> argparse.HelpFormatter:
        # every argparse formatter takes `width` (typeshed types the class by `prog` only)
        return self.formatter_class(prog=self.prog, width=_columns() - 2)  # type: ignore[call-arg]


def _top_parser(cls: type[argparse.ArgumentParser] = _Parser, **kw: Any
                ) -> argparse.ArgumentParser:
    parser = cls(
        prog="swarm-tui", description="Terminal operations console for LLM agent swarms. "
        "Without a sub-command: the console (built-in simulator when nothing is configured).",
        **kw)
    common_flags(parser, top=True)
    console_flags(parser, top=True)
    return parser


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with `only` the top level and that one command."""
    parser = _top_parser()
    parser.add_argument("--version", action="version", version=f"swarm-tui {__version__}")
    sub = parser.add_subparsers(dest="command")
    for name in PARSERS:
        if only is None or name == only:
            _of(name, "add")(sub)
    return parser


class _NotACommand(Exception):
    pass


class _WordFinder(_Parser):
    def error(self, message: str) -> NoReturn:
        raise _NotACommand(message)


def command_word(argv: Sequence[str]) -> str | None:
    """The sub-command `argv` names, read past the top-level options as the real parser
    reads them (`--db runs.db runs`); None for help, a mistake, or no command — then the
    whole tree is built, so `--help` and argparse's own errors list every command."""
    pre = _top_parser(_WordFinder, add_help=False)
    pre.add_argument("-h", "--help", action="store_true")
    pre.add_argument("word", nargs="?")
    pre.add_argument("rest", nargs=argparse.REMAINDER)
    try:
        known = pre.parse_known_args(list(argv))[0]
    except _NotACommand:
        return None
    return known.word if known.word in PARSERS and not known.help else None


# the commands that stay up: the collector's start-up threshold is theirs only while they
# start (cli/collector.py); the others read, write a few rows, and end
STAYS = frozenset({"run", "watch", "serve", "resume", "replay", "worker", "sim"})


def main(argv: Sequence[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else list(argv)
    completing = "_ARGCOMPLETE" in os.environ
    parser = build_parser(None if completing else command_word(args_in))
    if completing:  # the shell asks for completions (and nothing runs)
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(args_in)
    if args.command in STAYS or (args.command is None and interactive()):
        collector.as_usual()  # a run, a console, a worker: collected as usual from here
    if args.command is None and not interactive():
        parser.print_help()  # the console needs a terminal
        return EXIT_OK
    speak_utf8()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = TerminalStream(stdout, True), TerminalStream(stderr, False)
    try:
        handler: Callable[[argparse.Namespace], int] = _of(args.command, "cmd")
        return handler(args)
    except UserError as e:
        print(f"swarm-tui: error: {' '.join(_redacted(e).split())}", file=sys.stderr)
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


def _redacted(e: Exception) -> str:
    """Its text with anything secret-shaped masked (imported here: a command that
    succeeds never needs it)."""
    from swarm_tui.gateway.keys import redact

    return redact(str(e))


def _internal(e: Exception) -> int:
    """The last resort: one line, no traceback, no secret."""
    if os.environ.get("SWARM_TUI_DEBUG"):
        raise e
    print(f"swarm-tui: internal error: {type(e).__name__}: {_redacted(e)} "
          "(set SWARM_TUI_DEBUG=1 for a traceback)", file=sys.stderr)
    return EXIT_INTERNAL
