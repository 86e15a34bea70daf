"""The stored-run verbs: `runs`, `report`, `cost`, `export` — each parser beside its
handler (the work is in commands/history.py)."""

from __future__ import annotations

import argparse
import os

from swarm_tui.cli.flags import STORED_RUN, at_least_one, common_flags
from swarm_tui.cli.shared import brief_with_db
from swarm_tui.errors import EXIT_OK, UserError


def add_runs(sub: argparse._SubParsersAction) -> None:
    runs = sub.add_parser("runs", help="stored runs, newest first")
    common_flags(runs)
    runs.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    runs.add_argument("--limit", type=at_least_one, default=50,
                      help="at most this many (default 50)")
    runs.add_argument("--moments", action="store_true",
                      help="under each run, its notable moments (first failure, cooldowns, "
                      "alerts, canary moves) with the command that opens each")


def cmd_runs(args: argparse.Namespace) -> int:
    from swarm_tui.store.db import resolve_db_target
    from swarm_tui.store.target import missing_file

    db = resolve_db_target(args.db)
    if missing_file(db):
        if args.db or os.environ.get("SWARM_TUI_DB"):  # a path you named: a typo is no
            # empty store (it read "no runs recorded yet", exit 0)
            raise UserError(f"database {db}: does not exist (check --db / SWARM_TUI_DB)")
        print("[]" if args.json else "no runs recorded yet")
        return EXIT_OK
    from swarm_tui.commands import history

    return brief_with_db(args, history.runs, args, create=False)


def add_report(sub: argparse._SubParsersAction) -> None:
    report = sub.add_parser("report", help="a stored run's summary, or two runs compared")
    common_flags(report)
    report.add_argument("run_id", help=STORED_RUN)
    report.add_argument("--compare", metavar="RUN_B", help="before/after table: RUN_ID vs RUN_B")
    report.add_argument("--json", action="store_true",
                        help="the summary object `run --json` prints")


def cmd_report(args: argparse.Namespace) -> int:
    from swarm_tui.commands import history

    return brief_with_db(args, history.report, args, create=False)


def add_cost(sub: argparse._SubParsersAction) -> None:
    cost = sub.add_parser("cost", help="a run's cost: totals, breakdowns, projections, "
                          "what-if per model and for the routing")
    common_flags(cost)
    cost.add_argument("run_id", help=STORED_RUN)
    cost.add_argument("--json", action="store_true", help="the breakdown as JSON")


def cmd_cost(args: argparse.Namespace) -> int:
    from swarm_tui.commands import history

    return brief_with_db(args, history.cost, args, create=False)


def add_export(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser("export", help="a run's tasks and attempts as CSV or JSON Lines")
    common_flags(export)
    export.add_argument("run_id", help=STORED_RUN)
    export.add_argument("--format", choices=["csv", "jsonl"], default="jsonl",
                        help="csv: one row per attempt; jsonl (default): one task per line")
    export.add_argument("--out", metavar="FILE", help="default: standard output")


def cmd_export(args: argparse.Namespace) -> int:
    from swarm_tui.commands import history

    return brief_with_db(args, history.export, args, create=False)
