"""The command line (issue 33: a parser per command beside its handler, one handler table).

main.py assembles the parser from run.py (run, resume, worker), consoles.py (the console,
watch, serve, replay), stored.py (runs, report, cost, export) and admin.py (db, canary,
keys, sim, completion); flags.py holds the options several commands take, shared.py what
the handlers share, exits.py the exit-code table. Importing any of it imports no engine,
store, pydantic or driver: each handler brings what it uses.
"""

from swarm_tui.cli import collector

collector.while_starting()  # before the imports below (collector.py says why)

from swarm_tui.cli.main import build_parser, main  # noqa: E402

__all__ = ["build_parser", "main"]
