"""`swarm-tui canary status|promote|promote-full|pause|resume|abort|set|retry|history`."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

from swarm_tui.canary import state as st
from swarm_tui.canary import stored
from swarm_tui.core import fmt
from swarm_tui.core.plain import as_plain
from swarm_tui.errors import EXIT_OK, UserError
from swarm_tui.report import canary as report
from swarm_tui.settings.sections import CanaryConfig
from swarm_tui.settings.view import ConfigView
from swarm_tui.store import canary as cs
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.target import DbTarget

if TYPE_CHECKING:
    from swarm_tui.canary.analysis import Analysis



def canary_config(cfg: ConfigView) -> CanaryConfig:
    c = cfg.settings.canary
    if c is None and cfg.simulated_only:
        from swarm_tui.settings.sections import SIM_CANARY

        return SIM_CANARY  # no gateways configured: the simulator's demo canary
    if c is None:
        where = f"config {cfg.path}" if cfg.path else "config (none found)"
        raise UserError(f"{where}: no [canary] section (baseline, candidate gateways)")
    return c


async def run(conn: StoreConnection, path: DbTarget, cfg: ConfigView,
              args: argparse.Namespace) -> int:
    c = canary_config(cfg)
    if args.verb == "status":
        state = await cs.peek_state(conn, c)
        # judged as the executing run judges it: with the loop lag it measured over the
        # stage (a client-bound stage is inconclusive here too, not pass/fail)
        from swarm_tui.store.reads import canary_judged_lag

        lag = await canary_judged_lag(conn, c.name)
        analysis = await stored.analyze(conn, c, state, client_lag_ms=lag)
        if args.json:
            print(json.dumps({
                "name": c.name, "mode": c.mode, "stages": c.stages,
                "bake_s": c.bake_s(state.stage_index(c.stages)),
                "baked_s": time.time() - state.bake_started_at,
                "state": state.__dict__, "allowed": st.allowed_actions(state.status),
                "analysis": as_plain(analysis),
                "overall": analysis.overall, "executor_lag_ms": lag,
            }, indent=2))
        else:
            print(status_text(c, state, analysis))
        return EXIT_OK
    if args.verb == "history":
        items = await cs.history(conn, c.name, args.limit)
        if args.json:
            print(json.dumps([as_plain(i) for i in items], indent=2))
        else:
            print("\n".join(report.history_line(i) for i in items) or "no canary actions yet")
        return EXIT_OK
    if args.readonly:
        raise UserError(f"canary {args.verb}: refused, --readonly")
    if args.verb == st.SET and args.pct is None:
        raise UserError("canary set: give the percentage, e.g. `swarm-tui canary set 25`")
    if args.verb != st.SET and args.pct is not None:
        raise UserError(f"canary {args.verb}: takes no percentage")
    before = await cs.load_state(conn, c)
    after = await stored.act(conn, c, args.verb, args.pct, source="cli", reason=args.reason,
                         path=path)
    print(f"canary {c.name}: {args.verb}: {before.pct}% {before.status} → "
          f"{after.pct}% {after.status}")
    return EXIT_OK


def status_text(c: CanaryConfig, state: st.CanaryState, analysis: Analysis) -> str:
    bake = c.bake_s(state.stage_index(c.stages))
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state.stage_started_at))
    lines = [
        f"canary {c.name}   mode {c.mode}   {state.status.upper()}   {state.pct}% of users "
        f"on {c.candidate}",
        f"stages  {report.ladder(state, c.stages)}",
        f"bake    {fmt.duration(time.time() - state.bake_started_at)} of "
        f"{fmt.duration(bake)}   stage since {since}",
        f"allowed {', '.join(st.allowed_actions(state.status)) or '-'}",
        "",
        "this stage:",
        report.figure_table(analysis.stage),
        "",
        f"last {fmt.duration(analysis.window_s)}:",
        report.figure_table(analysis.window),
        "",
        f"gates ({analysis.overall}):",
        *report.verdict_lines(analysis.verdicts),
    ]
    return "\n".join(lines)
