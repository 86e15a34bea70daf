"""The console at fixed moments of a stored incident (issue 35): before, during and after
a 429 storm and a canary abort, the grid, the keys and the canary as they were then —
and `replay --at T --screenshot` draws the same moment as the console does."""

from __future__ import annotations

import os
import re
import stat
import time
from datetime import UTC, datetime

import pytest

from swarm_tui.core import fmt
from swarm_tui.core.moments import moment_iso
from swarm_tui.run_sources import StoreSource
from swarm_tui.ui.app import SwarmApp
from tests import moment_fixture as mf
from tests.conftest import swarm
from tests.ui_fixtures import screen_text, steady, wait_for
from tests.unit.test_ui_snapshots import settle

SIZE = (80, 24)  # the on-call's tmux pane


@pytest.fixture
def incident_db(tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")  # clock times in the pictures
    time.tzset()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SWARM_TUI_CONFIG", raising=False)
    path = tmp_path / "runs.db"
    mf.build(path)
    os.chmod(path, 0o600)
    yield path
    time.tzset()


def console_at(db, moment: str) -> SwarmApp:
    source = StoreSource(db, mf.RUN_ID, at=mf.T0 + mf.MOMENTS[moment])
    return SwarmApp(source, refresh_s=10, db_target=db, readonly=True)


async def drawn(pilot) -> None:
    await wait_for(lambda: pilot.app.snapshot is not None, what="the first snapshot")
    await settle(pilot)


def press_then_wait(key: str, text: str):
    async def run_before(pilot) -> None:
        await drawn(pilot)
        await pilot.press(key)
        await wait_for(lambda: text in screen_text(pilot.app), what=text)
        await steady(pilot)
    return run_before


@pytest.mark.parametrize("moment", list(mf.MOMENTS))
def test_the_dashboard_at_each_moment(snap_compare, incident_db, moment):
    assert snap_compare(console_at(incident_db, moment), terminal_size=SIZE, run_before=drawn)


@pytest.mark.parametrize("moment", list(mf.MOMENTS))
def test_the_keys_at_each_moment(snap_compare, incident_db, moment):
    """Before: every key active. During: key A cooling (its 429s counted), B carrying its
    traffic. After: A active again."""
    assert snap_compare(console_at(incident_db, moment), terminal_size=SIZE,
                        run_before=press_then_wait("k", mf.KEY_C))


@pytest.mark.parametrize("moment", ["before", "after"])
def test_the_canary_at_each_moment(snap_compare, incident_db, moment):
    """Before: 25 % progressing, its bake timer 1.5 s in. After: aborted at 0 %."""
    assert snap_compare(console_at(incident_db, moment), terminal_size=SIZE,
                        run_before=press_then_wait("g", "history"))


async def test_keys_and_canary_are_as_they_were_at_each_moment(incident_db):
    """The figures behind the pictures, said in words."""
    expect = {"before": ("active", 25, "progressing", 0),
              "during": ("cooling", 25, "progressing", 3),
              "after": ("active", 0, "aborted", 3)}
    for moment, (a_state, pct, status, limited) in expect.items():
        source = StoreSource(incident_db, mf.RUN_ID, at=mf.T0 + mf.MOMENTS[moment])
        await source.open()
        try:
            snap = await source.snapshot()
        finally:
            await source.close()
        keys = {k.fingerprint: k for k in snap.keys}
        assert keys[mf.KEY_A].state == a_state, moment
        assert keys[mf.KEY_A].rate_limited == limited, moment
        assert keys[mf.KEY_B].state == keys[mf.KEY_C].state == "active", moment
        view = snap.canary_view
        assert (view.state.pct, view.state.status) == (pct, status), moment
        assert snap.canary.startswith(f"canary {pct}% {status}"), moment
        if moment == "during":  # cooling 10.3 → 16 s: 4 s left at 12 s
            assert keys[mf.KEY_A].cooling_until - (mf.T0 + 12.0) == pytest.approx(4.0)


def _svg_text(svg: str) -> str:
    """The characters an SVG screenshot shows, row by row (Textual writes one <text> per
    run of one style; `&#160;` for spaces)."""
    rows: dict[str, list[str]] = {}
    for y, body in re.findall(r'<text[^>]*\by="([\d.]+)"[^>]*>(.*?)</text>', svg):
        rows.setdefault(y, []).append(body)
    import html

    return "\n".join(html.unescape("".join(parts)).replace("\xa0", " ").rstrip()
                     for _y, parts in sorted(rows.items(), key=lambda kv: float(kv[0])))


@pytest.mark.slow
@pytest.mark.parametrize("moment", list(mf.MOMENTS))
async def test_the_screenshot_of_a_moment_is_the_console_at_that_moment(
        incident_db, tmp_path, moment):
    at = datetime.fromtimestamp(mf.T0 + mf.MOMENTS[moment], UTC).isoformat()
    shot = tmp_path / f"{moment}.svg"
    env = {"SWARM_TUI_DB": str(incident_db), "TZ": "UTC"}
    r = swarm("replay", mf.RUN_ID, "--at", at, "--screenshot", str(shot), "--size", "80x24",
              env=env)
    assert r.returncode == 0, r.stderr
    app = console_at(incident_db, moment)
    async with app.run_test(size=SIZE) as pilot:
        await drawn(pilot)
        await steady(pilot)
        console = app.export_screenshot()
    assert _svg_text(shot.read_text()) == _svg_text(console)
    # the status block for the ticket names the same moment
    offset = mf.MOMENTS[moment]
    header = f" at {moment_iso(mf.T0 + offset)} (+{fmt.duration(offset)}): "
    assert header in r.stdout, r.stdout
    # the operator's data (task ids, errors, cost): private as an export, whatever the umask
    assert stat.S_IMODE(shot.stat().st_mode) == 0o600


async def test_mark_move_and_compare_say_what_changed(incident_db):
    """`m` at 7.5 s, `>` to 17.5 s, `c`: the storm's 429s on key A, the tasks that ended
    between, and the canary unchanged (it aborts at 20 s)."""
    app = console_at(incident_db, "before")
    async with app.run_test(size=(100, 40)) as pilot:
        await drawn(pilot)
        assert not app.check_action("compare_moments", ())  # nothing marked yet
        await pilot.press("m")
        await pilot.press("greater_than_sign")
        await wait_for(lambda: app.source.at == pytest.approx(mf.T0 + 17.5)
                    and app.snapshot is not None
                    and app.snapshot.elapsed_s == pytest.approx(17.5), what="the moved moment")
        await pilot.press("c")
        await wait_for(lambda: "from 2026-12-04T16:00:07Z" in screen_text(app))
        text = screen_text(app)
    assert "from 2026-12-04T16:00:07Z to 2026-12-04T16:00:17Z (10.0 s)" in text, text
    assert "succeeded        15 →       34  (+19)" in text, text
    assert "calls            15 →       38  (+23)" in text, text
    assert re.search(r"sk-…aaaa#a1a1a1\s+active → active\s+\+4 calls, \+3 429s", text), text
    assert "canary " not in text.split("keys")[-1]  # the canary did not move in between


async def test_space_plays_a_replay_and_stops_at_the_end(incident_db):
    app = console_at(incident_db, "after")
    async with app.run_test(size=SIZE) as pilot:
        await drawn(pilot)
        await pilot.press("space", "space")  # 1×, then 10×
        await wait_for(lambda: app.source.at >= mf.T0 + mf.END_S, what="the run's end")
        assert app.source.at == pytest.approx(mf.T0 + mf.END_S)  # 5.5 s of run at 10×
        await wait_for(lambda: app._speed is None, what="the player stopping itself")
        assert "‖ ├" in screen_text(app)  # the bar says paused
