"""The console's cost panel: live figures, budget, what-if; a picture."""

from __future__ import annotations

import dataclasses

import pytest

from swarm_tui.run.wiring import RunOptions
from swarm_tui.run_sources import LiveSource
from swarm_tui.sim.settings import SimSettings
from swarm_tui.ui.app import SwarmApp
from swarm_tui.ui.cost_panel import CostScreen
from swarm_tui.workload import demo_tasks
from tests.functional.test_ui import notes
from tests.ui_fixtures import (
    FixedSource,
    cost_report_fixture,
    mid_run_snapshot,
    open_screen,
    screen_text,
    wait_for,
)


@pytest.mark.slow
async def test_cost_panel_follows_a_live_run_with_a_budget(cfg, tmp_path):
    # the cap (with the in-flight calls reserved) takes several rounds of 1 s calls, however
    # fast the machine, and the panel reloads each second. It opens as the run starts and
    # must show the run's cost growing while it runs, and its final spend once the run
    # stopped at the cap (no window to catch between two polls).
    opts = RunOptions(sim=SimSettings(profile="fixed:1000", rate_429=0, rate_503=0),
                      concurrency=10, budget_usd=0.05)
    source = LiveSource(cfg, opts, demo_tasks(300), tmp_path / "runs.db")
    app = SwarmApp(source, db_target=tmp_path / "runs.db", refresh_s=0.1)
    async with app.run_test(size=(110, 40)) as pilot:
        await wait_for(lambda: "/$0.05" in screen_text(app), what="spent / cap in the status bar",
                       seen=lambda: screen_text(app)[:300])
        await pilot.press("dollar_sign")
        await wait_for(lambda: isinstance(app.screen, CostScreen), what="the cost panel")
        panel = app.screen
        assert isinstance(panel, CostScreen)
        shown: list[float] = []
        while source.active:  # every figure the panel held while the run ran
            if panel.report is not None and (not shown or panel.report.total.cost_usd
                                             != shown[-1]):
                shown.append(panel.report.total.cost_usd)
            await pilot.pause(0.05)
        assert source.runner is not None and source.runner.stop_reason == "budget_stopped"
        spent = source.runner.spent_usd
        assert spent <= 0.05
        assert len([c for c in shown if c > 0]) >= 2, shown  # live: it grew while it ran
        await wait_for(lambda: panel.report is not None
                       and abs(panel.report.total.cost_usd - spent) < 1e-9,
                       what="the panel at the run's final spend",
                       seen=lambda: (panel.report and panel.report.total.cost_usd, spent))
        text = screen_text(app)
        for needle in ("by model", "deepseek-v3.2", "budget", "of $0.05", "what-if",
                       "claude-sonnet-4.5", "routing what-if", "tasks/day"):
            assert needle in text, needle
        await pilot.press("escape")


async def test_cost_key_without_a_run_says_so():
    app = SwarmApp(refresh_s=10)
    async with app.run_test() as pilot:
        await pilot.press("dollar_sign")
        await wait_for(lambda: notes(app, "no run here"))
        assert not isinstance(app.screen, CostScreen)


class CostSource(FixedSource):
    async def cost(self):
        return cost_report_fixture(self.snap.budget_usd)


@pytest.mark.slow
def test_cost_panel_snapshot(snap_compare):
    snap = dataclasses.replace(mid_run_snapshot(), budget_usd=0.50)

    async def open_panel(pilot):
        await open_screen(pilot, "dollar_sign", CostScreen)

    assert snap_compare(SwarmApp(CostSource(snap), refresh_s=10), terminal_size=(100, 32),
                        run_before=open_panel)
