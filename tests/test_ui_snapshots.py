"""Pictures of the console (pytest-textual-snapshot): dashboard, detail, history, help,
at 80x24 and 160x50, and the dashboard in every shipped theme."""

from __future__ import annotations

import pytest

from swarm_tui.ui.app import SwarmApp
from swarm_tui.ui.themes import load_themes
from tests.ui_fixtures import FixedSource, mid_run_snapshot

SIZES = [(80, 24), (160, 50)]


def app(theme: str = "swarm-dark", **kw) -> SwarmApp:
    return SwarmApp(FixedSource(mid_run_snapshot()), refresh_s=10, theme=theme, **kw)


async def settle(pilot) -> None:
    await pilot.pause(0.2)
    await pilot.app.tick()
    await pilot.pause(0.1)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_dashboard(snap_compare, size):
    assert snap_compare(app(), terminal_size=size, run_before=settle)


@pytest.mark.parametrize("theme", sorted(load_themes()))
def test_dashboard_themes(snap_compare, theme):
    assert snap_compare(app(theme), terminal_size=(80, 24), run_before=settle)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_agent_detail(snap_compare, size):
    async def open_detail(pilot):
        await settle(pilot)
        await pilot.press("right", "enter")
        await pilot.pause(0.2)

    assert snap_compare(app(), terminal_size=size, run_before=open_detail)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_help(snap_compare, size):
    assert snap_compare(app(), terminal_size=size, press=["question_mark"], run_before=settle)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_history(snap_compare, size, stored_runs_db):
    async def open_history(pilot):
        await settle(pilot)
        await pilot.press("h")
        await pilot.pause(0.3)

    assert snap_compare(app(db_path=stored_runs_db), terminal_size=size,
                        run_before=open_history)
