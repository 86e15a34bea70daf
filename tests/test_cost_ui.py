"""The console's cost panel: live figures, budget, what-if; a picture."""

from __future__ import annotations

import dataclasses

from swarm_tui.execution.wiring import RunOptions
from swarm_tui.run_sources import LiveSource
from swarm_tui.sim.settings import SimSettings
from swarm_tui.ui.app import SwarmApp
from swarm_tui.ui.cost_panel import CostScreen
from swarm_tui.workload import demo_tasks
from tests.test_ui import notes, wait_for
from tests.ui_fixtures import FixedSource, cost_report_fixture, mid_run_snapshot, screen_text


async def test_cost_panel_follows_a_live_run_with_a_budget(cfg, tmp_path):
    opts = RunOptions(sim=SimSettings(profile="fixed:300", rate_429=0, rate_503=0),
                      concurrency=10, budget_usd=0.05)
    source = LiveSource(cfg, opts, demo_tasks(300), tmp_path / "runs.db")
    app = SwarmApp(source, db_path=tmp_path / "runs.db", refresh_s=0.1)
    async with app.run_test(size=(110, 40)) as pilot:
        await wait_for(lambda: source.runner is not None and source.runner.counts["succeeded"]
                       > 5)
        await wait_for(lambda: "/$0.05" in screen_text(app))  # status bar: spent / cap
        await pilot.press("dollar_sign")
        await wait_for(lambda: isinstance(app.screen, CostScreen) and app.screen.report
                       is not None)
        await pilot.pause(0.2)
        text = screen_text(app)
        for needle in ("by model", "deepseek-v3.2", "budget", "of $0.05", "what-if",
                       "claude-sonnet-4.5", "routing what-if", "tasks/day"):
            assert needle in text, needle
        first = app.screen.report.total.cost_usd
        await wait_for(lambda: app.screen.report.total.cost_usd > first)  # live
        await pilot.press("escape")
        await wait_for(lambda: not source.active, timeout=60)
        assert source.runner.stop_reason == "budget_stopped"
        assert source.runner.spent_usd <= 0.05


async def test_cost_key_without_a_run_says_so():
    app = SwarmApp(refresh_s=10)
    async with app.run_test() as pilot:
        await pilot.press("dollar_sign")
        await wait_for(lambda: notes(app, "no run here"))
        assert not isinstance(app.screen, CostScreen)


class CostSource(FixedSource):
    async def cost(self):
        return cost_report_fixture(self.snap.budget_usd)


def test_cost_panel_snapshot(snap_compare):
    snap = dataclasses.replace(mid_run_snapshot(), budget_usd=0.50)

    async def open_panel(pilot):
        await pilot.pause(0.2)
        await pilot.press("dollar_sign")
        await pilot.pause(0.3)

    assert snap_compare(SwarmApp(CostSource(snap), refresh_s=10), terminal_size=(100, 32),
                        run_before=open_panel)
