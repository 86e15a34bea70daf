"""The console's canary panel: actions, confirmation, readonly and state rules, a picture."""

from __future__ import annotations

import sqlite3
import time
import types
from pathlib import Path

import pytest

from swarm_tui.canary.controller import read_view
from swarm_tui.core.checks import checked
from swarm_tui.run.wiring import RunOptions
from swarm_tui.run_sources import LiveSource
from swarm_tui.settings.loader import load_config
from swarm_tui.settings.sections import CanaryConfig
from swarm_tui.store import canary as cs
from swarm_tui.ui import canary_panel
from swarm_tui.ui.app import SwarmApp
from swarm_tui.ui.canary_panel import CanaryScreen
from swarm_tui.ui.grid import TaskGrid
from swarm_tui.ui.screens import FormScreen
from swarm_tui.workload import demo_tasks
from tests.conftest import TEST_KEY
from tests.functional.test_ui import notes
from tests.ui_fixtures import (
    CANARY_NOW,
    FixedSource,
    canary_view,
    mid_run_snapshot,
    open_screen,
    screen_text,
    steady,
    wait_for,
)

CFG = checked(CanaryConfig, dict(baseline="direct", candidate="gw", mode="manual", bake="1h"))


def stored(db) -> tuple[str, int]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT status, pct FROM canary").fetchone()


def actions(db) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT action, source, reason, to_pct FROM canary_actions "
                         "ORDER BY id").fetchall()


@pytest.mark.slow
async def test_panel_actions_confirm_and_follow_state_rules(tmp_path):
    db = tmp_path / "runs.db"
    app = SwarmApp(db_target=db, refresh_s=0.1, canary=CFG)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("g")
        await wait_for(lambda: isinstance(app.screen, CanaryScreen) and app.screen.view)
        await steady(pilot)
        text = screen_text(app)
        assert "canary direct->gw" in text and "PROGRESSING" in text and "[5]" in text
        assert "gates: inconclusive" in text
        await pilot.press("r")  # resume while progressing: refused, nothing asked
        await wait_for(lambda: notes(app, "cannot resume while progressing") == 1)
        assert not isinstance(app.screen, FormScreen)
        await pilot.press("a")  # abort asks first; escape changes nothing
        await wait_for(lambda: isinstance(app.screen, FormScreen))
        await pilot.press("escape")
        await wait_for(lambda: isinstance(app.screen, CanaryScreen))
        assert not db.exists() or stored(db) is None or stored(db)[0] == "progressing"
        await pilot.press("s")  # set asks for the percentage and a reason
        await wait_for(lambda: isinstance(app.screen, FormScreen))
        await pilot.press("3", "0", "enter", *"more traffic", "enter")
        await wait_for(lambda: db.exists() and stored(db) == ("progressing", 30))
        await pilot.press("a")
        await wait_for(lambda: isinstance(app.screen, FormScreen))
        await pilot.press(*"p99 regression", "enter")
        await wait_for(lambda: stored(db) == ("aborted", 0))
        await wait_for(lambda: "ABORTED" in screen_text(app))
        await pilot.press("p")  # promote after abort: refused (retry is the way back)
        await wait_for(lambda: notes(app, "cannot promote while aborted (allowed: retry)"))
    assert actions(db)[1:] == [("set", "console", "more traffic", 30),
                               ("abort", "console", "p99 regression", 0)]


async def test_the_panel_offers_only_what_its_state_allows_and_asks_when_no_run_uses_it(
        tmp_path):
    """`g` with no run here: the footer offers the moves a progressing canary allows (no
    Resume, no Retry), and a move asks, saying that no run here routes by it (issue 36)."""
    db = tmp_path / "runs.db"
    app = SwarmApp(db_target=db, refresh_s=0.1, canary=CFG)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("g")
        await wait_for(lambda: isinstance(app.screen, CanaryScreen) and app.screen.view)
        await wait_for(lambda: "Promote" in screen_text(app).splitlines()[-1])
        footer = screen_text(app).splitlines()[-1]
        assert "Abort" in footer and "Resume" not in footer and "Retry" not in footer, footer
        assert "no run in this console routes by this canary" in screen_text(app)
        await pilot.press("a")
        await wait_for(lambda: isinstance(app.screen, FormScreen))
        question = screen_text(app)
        assert "No run in this console routes by this canary" in question, question
        await pilot.press("escape")
        await wait_for(lambda: isinstance(app.screen, CanaryScreen))
        await pilot.press("r")  # a hidden key still says why
        await wait_for(lambda: notes(app, "cannot resume while progressing") == 1)


@pytest.mark.slow
async def test_readonly_console_cannot_act_on_the_canary(tmp_path):
    db = tmp_path / "runs.db"
    app = SwarmApp(db_target=db, refresh_s=0.1, canary=CFG, readonly=True)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("g")
        await wait_for(lambda: isinstance(app.screen, CanaryScreen) and app.screen.view)
        for n, key in enumerate(("p", "f", "z", "a", "s"), 1):
            await pilot.press(key)
            await wait_for(lambda n=n: notes(app, "read-only console") == n)  # refused
            assert isinstance(app.screen, CanaryScreen)
        footer = screen_text(app).splitlines()[-1]
        assert "Promote" not in footer and "Abort" not in footer, footer  # nothing offered
    with sqlite3.connect(db) as c:  # viewing wrote nothing either
        assert c.execute("SELECT count(*) FROM canary").fetchone()[0] == 0


async def test_no_canary_configured_says_so():
    app = SwarmApp(FixedSource(mid_run_snapshot()), refresh_s=10)
    async with app.run_test() as pilot:
        await pilot.press("g")
        await wait_for(lambda: notes(app, "no canary configured"))
        assert not isinstance(app.screen, CanaryScreen)
        # a toast is text, never markup (Textual's Toast parses it only when asked):
        # `[canary]` once showed as nothing, and a label `[@click=app.quit]` is a link
        app.screen.query_one(TaskGrid).notify("key label [@click=app.quit]x[/]")  # a widget's own
        await wait_for(lambda: notes(app, "[@click=app.quit]x[/]"))
        assert not any(n.markup for n in app._notifications)


@pytest.mark.slow
async def test_console_set_moves_its_own_running_swarm(sim_factory, tmp_path, monkeypatch):
    base = sim_factory(profile="fixed:300")
    cand = sim_factory(profile="fixed:300")
    from tests.functional.test_canary_runs import _config

    monkeypatch.setenv("SWARM_TEST_KEY", TEST_KEY)
    cfg = load_config(_config(tmp_path, base, cand, mode="manual", bake="1h"))
    db = tmp_path / "runs.db"
    source = LiveSource(cfg, RunOptions(concurrency=10), demo_tasks(300), db)
    app = SwarmApp(source, db_target=db, refresh_s=0.1, canary=cfg.settings.canary)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_for(lambda: source.canary is not None and source.canary.view is not None)
        await wait_for(lambda: "canary 5% progressing" in screen_text(app))  # status bar
        await pilot.press("g")
        await wait_for(lambda: isinstance(app.screen, CanaryScreen) and app.screen.view)
        await pilot.press("s")
        await wait_for(lambda: isinstance(app.screen, FormScreen))
        await pilot.press("1", "0", "0", "enter", "enter")
        await wait_for(lambda: source.canary.router.pct == 100)  # at once, not after a poll
        sent_after = source.runner.router.version
        assert sent_after >= 1
        await pilot.press("escape")
        source.loop.call_soon_threadsafe(source.runner.cancel)
        await wait_for(lambda: not source.active, timeout=30)
    with sqlite3.connect(db) as c:
        last = c.execute("SELECT action, source, to_pct FROM canary_actions ORDER BY id DESC "
                         "LIMIT 1").fetchone()
    assert last == ("set", "console", 100)


@pytest.mark.slow
def test_canary_panel_snapshot(snap_compare, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    fake_time = types.SimpleNamespace(time=lambda: CANARY_NOW, strftime=time.strftime,
                                      localtime=time.localtime)
    monkeypatch.setattr(canary_panel, "time", fake_time)
    view = canary_view()
    source = FixedSource(mid_run_snapshot())
    source.canary_view = view

    async def open_panel(pilot):
        await open_screen(pilot, "g", CanaryScreen)

    # the source's own (live) view is shown; the store is never read
    app = SwarmApp(source, refresh_s=10, db_target=Path("/nonexistent/runs.db"), canary=view.cfg)
    assert snap_compare(app, terminal_size=(80, 24), run_before=open_panel)


@pytest.mark.parametrize("window", [False, True])
def test_panel_text_has_the_before_after_table_and_gates(window):
    text = canary_panel.panel_text(canary_view(), window=window, now=CANARY_NOW).plain
    assert "0 ─ 5 ─ [25] ─ 50 ─ 100" in text
    assert "1h00m / 24h00m" in text and "passing 30m00s" in text
    for label in ("task success", "call success", "latency p50/95/99 ms", "ttft p50/95/99 ms",
                  "call errors", "tokens/task in/out", "cost/task"):
        assert label in text
    assert "unpriced" in text  # three candidate tasks on an unpriced model: never $0
    assert "p95       ✔ pass" in text and "cost      ? inconclusive  unpriced model" in text
    assert ("last 15m00s" in text) == window


async def test_read_view_writes_nothing(tmp_path):
    db = tmp_path / "runs.db"
    view = await read_view(db, CFG)
    assert view.state.status == "progressing" and view.state.pct == 5
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM canary").fetchone()[0] == 0
    assert cs  # the store module backs read_view


async def test_watching_a_run_shows_the_stored_canary_stage(stored_runs_db, tmp_path):
    from swarm_tui.canary.controller import act_stored
    from swarm_tui.run_sources import StoreSource

    conf = tmp_path / "c.toml"
    conf.write_text('[gateways.direct]\nbase_url = "http://127.0.0.1:9/v1"\n'
                    '[gateways.gw]\nbase_url = "http://127.0.0.1:9/v1"\n'
                    '[canary]\nbaseline = "direct"\ncandidate = "gw"\n')
    cfg = load_config(str(conf))
    await act_stored(stored_runs_db, cfg.settings.canary, "set", "25", "from a test", "cli")
    source = StoreSource(stored_runs_db, "20261201-100000-0000", cfg=cfg)
    await source.open()
    try:
        snap = await source.snapshot()
    finally:
        await source.close()
    assert snap.canary == "canary 25% progressing"
