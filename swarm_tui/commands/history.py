"""`runs`, `report`, `cost`, `export`: the stored-run verbs of the command line (the text
they print is report/'s, the queries store/'s)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from swarm_tui.core.plain import as_plain, to_json
from swarm_tui.errors import EXIT_OK

if TYPE_CHECKING:  # (each verb imports what it uses: `runs` reads no cost model)
    from swarm_tui.core.summary import RunSummary
    from swarm_tui.engine.cost import CostReport
    from swarm_tui.settings.view import ConfigView
    from swarm_tui.store.conn import StoreConnection
    from swarm_tui.store.target import DbTarget


async def summary_json(conn: StoreConnection, path: DbTarget, summary: RunSummary,
                       cfg: ConfigView, cost: CostReport | None = None) -> str:
    """The run's summary plus its cost breakdown: the same object `report --json` prints
    (`cost`: the breakdown when the caller has it already)."""
    from swarm_tui.report.cost import stored_cost
    from swarm_tui.store.runs import get_run

    data = as_plain(summary)
    if summary.status != "unsaved":
        if cost is None:
            cost = await stored_cost(conn, await get_run(conn, summary.run_id, path), cfg)
        data["cost"] = as_plain(cost)
    return json.dumps(data, indent=2)


async def runs(conn: StoreConnection, path: DbTarget, args: argparse.Namespace) -> int:
    from swarm_tui.report.listing import runs_listing, runs_table

    items = await runs_listing(conn, args.limit)
    if not args.moments:
        print(json.dumps([i.as_dict() for i in items], indent=2) if args.json
              else runs_table(items))
        return EXIT_OK
    # --moments: each run's notable moments (read per run: not in the plain listing,
    # which reads only the stored summaries)
    from swarm_tui.core.moments import moment_iso, moments_text, replay_command
    from swarm_tui.store.moments import notable_moments
    from swarm_tui.store.runs import get_run

    out: list[dict] = []
    if not args.json:
        print(runs_table(items).split("\n", 1)[0])  # the header (or: no runs recorded yet)
    for item in items:
        run = await get_run(conn, item.id, path)
        moments = await notable_moments(conn, run)
        if args.json:
            out.append({**item.as_dict(), "moments": [
                {"at": moment_iso(at), "offset_s": round(at - run.started_at, 3), "what": what,
                 "replay": replay_command(run.id, at)} for at, what in moments]})
            continue
        print(runs_table([item]).split("\n", 1)[1])
        text = moments_text(run.id, run.started_at, moments)
        print("\n".join("  " + line for line in text.splitlines()) if text
              else "  (no notable moments)")
    if args.json:
        print(json.dumps(out, indent=2))
    return EXIT_OK


async def report(conn: StoreConnection, path: DbTarget, args: argparse.Namespace) -> int:
    from swarm_tui.report.cost import cost_text, stored_cost
    from swarm_tui.report.history import compare_rows, compare_table, run_summary
    from swarm_tui.report.summary_text import summary_text
    from swarm_tui.store.runs import get_run

    run = await get_run(conn, args.run_id, path)
    a = await run_summary(conn, run)
    if args.compare:
        b = await run_summary(conn, await get_run(conn, args.compare, path))
        if args.json:
            print(json.dumps({"a": a.run_id, "b": b.run_id, "rows": compare_rows(a, b)},
                             indent=2))
        else:
            print(compare_table(a, b))
        return EXIT_OK
    from swarm_tui.commands.config_copy import read_view

    cfg = read_view(args.config)
    cost = await stored_cost(conn, run, cfg)
    if args.json:
        print(await summary_json(conn, path, a, cfg, cost))
    else:
        from swarm_tui.core.moments import moments_text
        from swarm_tui.store.moments import notable_moments

        moments = moments_text(run.id, run.started_at, await notable_moments(conn, run))
        print(summary_text(a) + ("\n\n" + moments if moments else "") + "\n\n"
              + cost_text(cost))
    return EXIT_OK


async def cost(conn: StoreConnection, path: DbTarget, args: argparse.Namespace) -> int:
    from swarm_tui.commands.config_copy import read_view
    from swarm_tui.report.cost import cost_text, stored_cost
    from swarm_tui.store.runs import get_run

    report = await stored_cost(conn, await get_run(conn, args.run_id, path),
                               read_view(args.config))
    print(to_json(report, indent=2) if args.json else cost_text(report))
    return EXIT_OK


async def export(conn: StoreConnection, path: DbTarget, args: argparse.Namespace) -> int:
    from swarm_tui.report.history import export_run, written_to
    from swarm_tui.store.runs import get_run

    run = await get_run(conn, args.run_id, path)
    with written_to(args.out or "-", "--out") as out:
        n = await export_run(conn, run, args.format, out)
    if args.out not in (None, "-"):
        print(f"exported {n} tasks of run {run.id} to {args.out}", file=sys.stderr)
    return EXIT_OK
