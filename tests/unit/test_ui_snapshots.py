"""Pictures of the console (pytest-textual-snapshot): dashboard, detail, history, help,
at 80x24 and 160x50, and the dashboard in every shipped theme."""

from __future__ import annotations

import pathlib

import pytest

from swarm_tui.ui.app import SwarmApp
from swarm_tui.ui.screens import ConfirmScreen, DetailScreen, RunsScreen
from swarm_tui.ui.themes import load_themes
from tests.ui_fixtures import FixedSource, mid_run_snapshot, screen_text, steady, wait_for

SIZES = [(80, 24), (160, 50)]


def app(theme: str = "swarm-dark", **kw) -> SwarmApp:
    kw.setdefault("view", "tasks")  # these pictures are of the all-tasks grid
    return SwarmApp(FixedSource(mid_run_snapshot()), refresh_s=10, theme=theme, **kw)


async def settle(pilot) -> None:
    """Wait for the state a picture needs (the grid focused: its cursor is drawn only
    then; on a loaded machine the focus came after the picture once), then one frame."""
    await wait_for(lambda: pilot.app.snapshot is not None, what="the first snapshot")
    await wait_for(lambda: pilot.app.focused is not None, what="the grid focused")
    await pilot.app.tick()
    await steady(pilot)
    await log_at_bottom(pilot)


async def log_at_bottom(pilot) -> None:
    """The event log follows its newest line a frame after the write: wait until it holds
    every line of the snapshot and sits at its bottom (under a CPU hog the picture was
    taken one line early, twice). Comparing against the bottom computed from the line
    count timed out once under load: not understood, so this waits on the weaker pair."""
    from swarm_tui.ui.widgets import EventLog

    logs = pilot.app.screen.query(EventLog)
    if not logs:
        return
    log = logs.first()

    def settled() -> bool:
        snap = pilot.app.snapshot
        if snap is None or len(log.lines) < len(snap.log):
            return False
        return log.scroll_offset.y >= log.max_scroll_y

    # held for five polls in a row: a height that settles later re-scrolls the log (its
    # on_resize), and the picture must come after that, not between the two
    streak = 0

    def held() -> bool:
        nonlocal streak
        streak = streak + 1 if settled() else 0
        return streak >= 5

    await wait_for(held, what="the log at its newest line")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_dashboard(snap_compare, size):
    assert snap_compare(app(), terminal_size=size, run_before=settle)


@pytest.mark.parametrize("theme", sorted(load_themes(pathlib.Path("/nonexistent"))))
def test_dashboard_themes(snap_compare, theme):
    assert snap_compare(app(theme), terminal_size=(80, 24), run_before=settle)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.slow
def test_agent_detail(snap_compare, size):
    async def open_detail(pilot):
        await settle(pilot)
        await pilot.press("right", "enter")
        await wait_for(lambda: isinstance(pilot.app.screen, DetailScreen), what="the detail")
        await steady(pilot)

    assert snap_compare(app(), terminal_size=size, run_before=open_detail)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_help(snap_compare, size):
    assert snap_compare(app(), terminal_size=size, press=["question_mark"], run_before=settle)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.slow
def test_history(snap_compare, size, stored_runs_db):
    async def open_history(pilot):
        await settle(pilot)
        await pilot.press("h")
        await wait_for(lambda: isinstance(pilot.app.screen, RunsScreen), what="the history")
        await steady(pilot)

    assert snap_compare(app(db_target=stored_runs_db), terminal_size=size,
                        run_before=open_history)


def test_status_bar_at_80_columns_with_canary_keys_and_a_long_run_id(snap_compare):
    """The bar degrades by priority: state, done/total, success, p95 and cost stay."""
    import dataclasses

    from swarm_tui.core.records import KeyRow

    keys = tuple(KeyRow("sim", f"sk-…{i}{i}{i}{i}#abc12{i}", None, "env:K", state, None, None,
                        3, 120, 2, 2, 1000, 2000, None)
                 for i, state in enumerate(("active", "cooling", "active")))
    snap = dataclasses.replace(mid_run_snapshot(), canary="canary 25% progressing 3m/24h",
                               keys=keys, run_id="20261203-101010-abcd [nightly/batch-7]")
    assert snap_compare(SwarmApp(FixedSource(snap), refresh_s=10, view="tasks"),
                        terminal_size=(80, 24),
                        run_before=settle)


@pytest.mark.slow
def test_confirm_dialog_over_the_dashboard(snap_compare):
    async def ask(pilot):
        await settle(pilot)
        # the dialog's own screen is steady; the dashboard beneath it is drawn apart. On one
        # loaded core it stayed blank beneath the dialog for 60 s (twice in a whole suite
        # under `taskset -c 0`, never alone): the dialog is closed and asked for again, up
        # to three times — a dashboard blank each time still fails, saying what was seen
        for attempt in range(3):
            await pilot.press("x")
            await wait_for(lambda: isinstance(pilot.app.screen, ConfirmScreen),
                           what="the dialog")
            await steady(pilot)
            try:
                await wait_for(lambda: "SIMULATED" in pilot.app.export_screenshot(), 15,
                               what="the dashboard beneath the dialog",
                               seen=lambda: screen_text(pilot.app))
                return
            except AssertionError:
                if attempt == 2:
                    raise
            await pilot.press("escape")
            await wait_for(lambda: not isinstance(pilot.app.screen, ConfirmScreen),
                           what="the dialog closed")
            await steady(pilot)

    assert snap_compare(app(), terminal_size=(80, 24), run_before=ask)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_agents_view(snap_compare, size):
    """The default view: one cell per concurrency slot (100), the call each makes now."""
    assert snap_compare(app(view="agents"), terminal_size=size, run_before=settle)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_keys_panel_with_long_labels_and_a_cooldown(snap_compare, size, monkeypatch):
    """80 columns keep the key, its label, its state (the cooldown counting down) and its
    429s; 160 columns show every column (issue 36)."""
    import dataclasses

    from swarm_tui.core.records import KeyRow
    from swarm_tui.ui import keys_panel

    now = 1_796_000_000.0
    import time
    import types

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr(keys_panel, "time", types.SimpleNamespace(
        time=lambda: now, strftime=time.strftime, localtime=time.localtime))
    keys = (
        KeyRow("gateway-production-eu", "sk-…a1b2#3f9c1e", "team-batch-nightly-reindex",
               "env:K", "cooling", now + 7.2, None, 3, 1200, 41, 2, 10_000, 20_000, now - 1),
        KeyRow("gateway-production-eu", "sk-…c3d4#77aa01", "spare", "file", "active", None,
               None, 5, 1300, 0, 0, 12_000, 21_000, now),
    )
    snap = dataclasses.replace(mid_run_snapshot(), keys=keys)

    async def open_keys(pilot):
        from textual.widgets import DataTable

        from swarm_tui.ui.keys_panel import KeysScreen

        await settle(pilot)
        await pilot.press("k")
        for _ in range(500):  # the panel holds both keys (state, not a fixed pause)
            screen = pilot.app.screen
            if isinstance(screen, KeysScreen) and screen.query_one(DataTable).row_count == 2:
                break
            await pilot.pause(0.02)
        await pilot.pause()  # then one frame

    assert snap_compare(SwarmApp(FixedSource(snap), refresh_s=10, view="tasks"),
                        terminal_size=size, run_before=open_keys)
