"""The console's keys panel: masked add, retire / enable with confirmation, readonly, picture."""

from __future__ import annotations

import time

import pytest
from textual import events

from swarm_tui.gateway.keypool import RETIRED
from swarm_tui.run.wiring import RunOptions
from swarm_tui.run_sources import LiveSource
from swarm_tui.sim.settings import SimSettings
from swarm_tui.ui.app import SwarmApp
from swarm_tui.ui.keys_panel import KeysScreen
from swarm_tui.ui.screens import ConfirmScreen, FormScreen
from swarm_tui.workload import demo_tasks
from tests.functional.test_ui import notes
from tests.ui_fixtures import FixedSource, keys_snapshot, open_screen, screen_text, wait_for

NEW_KEY = "sk-added-from-console-0123456789abcdef"


@pytest.mark.slow
async def test_add_retire_enable_from_the_keys_panel(cfg, tmp_path):
    opts = RunOptions(sim=SimSettings(profile="fixed:200", rate_429=0, rate_503=0),
                      concurrency=10)
    # long enough to outlast the key presses on a loaded machine; cancelled at the end
    source = LiveSource(cfg, opts, demo_tasks(5000), tmp_path / "runs.db")
    app = SwarmApp(source, db_target=tmp_path / "runs.db", refresh_s=0.1)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(lambda: source.runner is not None and source.runner.in_flight > 0)
        await pilot.press("k")
        await wait_for(lambda: isinstance(app.screen, KeysScreen) and app.screen.rows)
        assert "simulator" in screen_text(app) and "active" in screen_text(app)
        await pilot.press("a")
        await wait_for(lambda: isinstance(app.screen, FormScreen))
        assert app.focused is not None  # pasted, as an on-call engineer pastes a key
        app.focused.post_message(events.Paste(NEW_KEY))  # (typed: 40 presses, ~9 s)
        await wait_for(lambda: getattr(app.focused, "value", None) == NEW_KEY)
        assert NEW_KEY not in screen_text(app) and NEW_KEY[-8:] not in screen_text(app)
        await pilot.press("enter", *"console", "enter")
        await wait_for(lambda: isinstance(app.screen, KeysScreen) and len(app.screen.rows) == 2)
        gw = source.runner.gateways["sim"]
        new = gw.pool.by_secret(NEW_KEY)
        assert new is not None and new.label == "console" and new.source == "added"
        await wait_for(lambda: new.calls > 0)  # takes traffic
        await pilot.press("r")  # retire the selected (first) key, confirmed
        await wait_for(lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(lambda: gw.keys[0].state == RETIRED)
        await wait_for(lambda: "retired" in screen_text(app))
        calls = gw.keys[0].calls
        other = new.calls
        await wait_for(lambda: new.calls >= other + 20)  # traffic went on, on the new key …
        assert gw.keys[0].calls == calls  # … and not one new call on the retired key
        await pilot.press("e")
        await wait_for(lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")  # declined: stays retired
        await wait_for(lambda: isinstance(app.screen, KeysScreen))
        assert gw.keys[0].state == RETIRED
        await pilot.press("e")
        await wait_for(lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(lambda: gw.keys[0].state == "active")
        source.loop.call_soon_threadsafe(source.runner.cancel)
        await wait_for(lambda: not source.active, timeout=30)
    log = "\n".join(source.metrics.log)
    assert "added (console)" in log and "retired" in log and NEW_KEY not in log


async def test_readonly_keys_panel_changes_nothing():
    source = FixedSource(keys_snapshot(), readonly=True)
    source.key_op = None  # a read-only source offers no key operations at all
    app = SwarmApp(source, refresh_s=10, readonly=True)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("k")
        await wait_for(lambda: isinstance(app.screen, KeysScreen) and app.screen.rows)
        # its footer offers no change (a replay's keys panel offered them, then refused)
        await wait_for(lambda: "Back" in footer_words(app))
        assert not {"Add key", "Retire", "Enable"} & footer_words(app)
        assert "read-only" in str(app.screen.query_one("#runs-title").render())
        for n, key in enumerate(("a", "r", "e"), 1):
            await pilot.press(key)
            await wait_for(lambda n=n: notes(app, "read-only console") == n)  # refused
            assert isinstance(app.screen, KeysScreen)


def footer_words(app: SwarmApp) -> set[str]:
    from textual.widgets._footer import FooterKey

    return {k.description for k in app.screen.query(FooterKey)}


@pytest.mark.slow
def test_keys_panel_snapshot(snap_compare, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    source = FixedSource(keys_snapshot())
    source.key_op = None

    async def open_panel(pilot):
        await open_screen(pilot, "k", KeysScreen)

    assert snap_compare(SwarmApp(source, refresh_s=10), terminal_size=(100, 24),
                        run_before=open_panel)
