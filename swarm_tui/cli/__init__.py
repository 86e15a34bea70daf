"""The command line (issue 33: a parser per command beside its handler, one handler table).

main.py assembles the parser from run.py (run, resume, worker), consoles.py (the console,
watch, serve, replay), stored.py (runs, report, cost, export) and admin.py (db, canary,
keys, sim, completion); flags.py holds the options several commands take, shared.py what
the handlers share, exits.py the exit-code table. Importing any of it imports no engine,
store, pydantic or driver: each handler brings what it uses.
"""

from swarm_tui.cli import collector

collector.while_starting()  # before the imports below (collector.py says why)

from typing import NoReturn  # noqa: E402

from swarm_tui.cli.main import build_parser, main  # noqa: E402


def entry() -> NoReturn:
    """The installed `swarm-tui` and `python -m swarm_tui`: main(), then the exit (a
    reading command's without the last collection: collector.ending)."""
    try:
        code = main()
    finally:
        collector.ending()
    raise SystemExit(code)


__all__ = ["build_parser", "entry", "main"]
