"""Console behaviour with pilots: every binding against a real run on the simulator,
the readonly/watch rules, keymaps, and watch catching up with another process."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import subprocess
import sys

import pytest

from swarm_tui.run.wiring import RunOptions
from swarm_tui.run_sources import LiveSource, StoreSource
from swarm_tui.sim.settings import SimSettings
from swarm_tui.ui.app import SwarmApp
from swarm_tui.ui.filtering import FilterError, parse_filter, sort_cells
from swarm_tui.ui.grid import TaskGrid
from swarm_tui.ui.screens import ConfirmScreen, DetailScreen, HelpScreen, RunsScreen
from swarm_tui.workload import demo_tasks
from tests.ui_fixtures import FixedSource, mid_run_snapshot, screen_text, wait_for


def live(cfg, tmp_path, n=400, profile="fixed:400", readonly=False, **sim) -> LiveSource:
    opts = RunOptions(sim=SimSettings(profile=profile, rate_429=0, rate_503=0, **sim),
                      concurrency=20)
    return LiveSource(cfg, opts, demo_tasks(n), tmp_path / "runs.db", readonly=readonly)


def notes(app, text: str) -> int:
    """How many of the app's notifications say `text` (a refused action is one). With
    `lasting_notes`: a toast gone after Textual's 5 s is still counted on a slow machine."""
    return sum(text in str(n.message) for n in app._notifications)


@pytest.fixture
def lasting_notes(monkeypatch):
    """Notifications that outlast the test: counted as state, never raced against their
    5 s expiry (on one loaded core the fourth refusal came after the first had gone)."""
    monkeypatch.setattr(SwarmApp, "NOTIFICATION_TIMEOUT", 3600.0)


@pytest.mark.slow
async def test_every_run_binding_against_a_live_run(cfg, tmp_path):
    # long enough to outlast every key press on a loaded machine: the cancel at the end
    # must meet a live run (it once found the run already finished)
    source = live(cfg, tmp_path, n=4000)
    app = SwarmApp(source, db_target=tmp_path / "runs.db", refresh_s=0.1)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: source.runner is not None and source.runner.in_flight > 0)
        runner = source.runner
        await pilot.press("p")  # controls reach the engine's own loop a moment later
        await wait_for(lambda: runner.paused)
        await pilot.press("p")
        await wait_for(lambda: not runner.paused)
        await pilot.press("plus")
        await wait_for(lambda: runner.limit == 30)
        # the next snapshot carries the new concurrency
        await wait_for(lambda: app.snapshot is not None and app.snapshot.concurrency == 30)
        await pilot.press("minus")
        await wait_for(lambda: runner.limit == 20)
        await pilot.press("minus")
        await wait_for(lambda: runner.limit == 10)
        await wait_for(lambda: app.snapshot is not None and app.snapshot.concurrency == 10)
        await pilot.press("slash")
        await pilot.press(*"state:queued", "enter")
        grid = app.screen.query_one(TaskGrid)
        await wait_for(lambda: grid.cells and all(c.state == "queued" for c in grid.cells))
        await pilot.press("escape")
        await wait_for(lambda: len(grid.cells) == 4000)
        await pilot.press("s")
        assert app.sort_order == "latency"
        await pilot.press("space")
        assert app.frozen
        await pilot.press("space")
        await pilot.press("t")
        assert app.theme != "swarm-dark"
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen)
        await pilot.press("escape")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("s", "s", "s")  # back to index order
        await pilot.press("c")  # cancel the selected agent: asks, "n" keeps it
        assert isinstance(app.screen, ConfirmScreen)
        first = grid.selected
        await pilot.press("n")
        await wait_for(lambda: not isinstance(app.screen, ConfirmScreen))  # answered: no
        assert runner.records[first.seq].cancel_requested is False
        await pilot.press("end", "c", "y")  # the last agent is still queued
        second = grid.selected
        assert second.seq == 3999
        await wait_for(lambda: runner.records[3999].state == "cancelled")
        await pilot.press("x")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await wait_for(lambda: not source.active)
        assert runner.cancelled
        await pilot.press("h")
        await wait_for(lambda: isinstance(app.screen, RunsScreen) and app.screen.items)
        assert app.screen.items[0].id == source.run_id
        assert app.screen.items[0].status == "cancelled"
        await pilot.press("escape", "q")
    assert app.return_code == 0


@pytest.mark.slow
async def test_quit_asks_while_a_run_is_active_and_cancels_cleanly(cfg, tmp_path):
    source = live(cfg, tmp_path, n=2000)
    app = SwarmApp(source, db_target=tmp_path / "runs.db", refresh_s=0.1)
    async with app.run_test() as pilot:
        await wait_for(lambda: source.runner is not None and source.runner.in_flight > 0)
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert source.active
        await pilot.press("q", "y")
        await wait_for(lambda: app.return_code is not None, 20)
    assert app.return_code == 130
    raw = sqlite3.connect(tmp_path / "runs.db")
    assert raw.execute("SELECT status FROM runs").fetchone()[0] == "cancelled"
    queued = raw.execute("SELECT COUNT(*) FROM task_results WHERE state IN "
                         "('queued', 'cancelled')").fetchone()[0]
    assert queued > 0  # left resumable
    raw.close()


@pytest.mark.slow
@pytest.mark.usefixtures("lasting_notes")
async def test_readonly_console_changes_nothing(cfg, tmp_path):
    source = live(cfg, tmp_path, readonly=True)
    app = SwarmApp(source, db_target=tmp_path / "runs.db", refresh_s=0.1, readonly=True)
    async with app.run_test() as pilot:
        await wait_for(lambda: source.runner is not None and source.runner.in_flight > 0)
        runner = source.runner
        await pilot.press("p", "plus", "x", "c")
        await wait_for(lambda: notes(app, "read-only console") == 4)  # each key refused
        assert not runner.paused and runner.limit == 20 and not runner.cancelled
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("q")  # the run lives in this process: quitting stops it, so ask
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await wait_for(lambda: app.return_code is not None, 20)
    assert app.return_code == 130 and runner.cancelled


async def test_keymap_rebinds_actions():
    source = FixedSource(mid_run_snapshot())
    app = SwarmApp(source, keymap={"run.pause": "z"}, refresh_s=10)
    async with app.run_test() as pilot:
        await wait_for(lambda: app.snapshot is not None)
        await pilot.press("z")
        assert source.commands == [("pause", None)]
        await pilot.press("p")  # no longer bound
        assert source.commands == [("pause", None)]


async def test_command_palette_offers_every_action():
    app = SwarmApp(FixedSource(mid_run_snapshot()), refresh_s=10)
    async with app.run_test():
        await wait_for(lambda: app.snapshot is not None)
        titles = [c.title for c in app.get_system_commands(app.screen)]
    for wanted in ("Pause / resume dispatch", "Cancel the run (asks first)", "Filter agents",
                   "Stored runs: replay, compare", "Show the key bindings"):
        assert wanted in titles


async def test_the_palettes_screenshot_is_saved_private(tmp_path):
    """Textual saves it with the umask (0644 on a shared bastion); it shows task ids,
    errors and cost — the operator's data — so it is written 0600, as an export is."""
    old = os.umask(0o022)
    try:
        app = SwarmApp(FixedSource(mid_run_snapshot()), refresh_s=10)
        async with app.run_test():
            await wait_for(lambda: app.snapshot is not None)
            app.action_screenshot("moment.svg", str(tmp_path))
            await wait_for(lambda: (tmp_path / "moment.svg").exists())
    finally:
        os.umask(old)
    shot = tmp_path / "moment.svg"
    assert stat.S_IMODE(shot.stat().st_mode) == 0o600
    assert "<svg" in shot.read_text() and "demo-0000" in shot.read_text()


def test_filter_words():
    cells = mid_run_snapshot().cells
    assert {c.state for c in cells if parse_filter("state:fail")(c)} == {"failed"}
    assert all(c.state != "queued" for c in cells if parse_filter("!state:queued")(c))
    kimi = [c for c in cells if parse_filter("model:kimi !state:queued")(c)]
    assert kimi and all(c.model == "kimi-k2.5" and c.state != "queued" for c in kimi)
    assert [c.task_id for c in cells if parse_filter(r"demo-0000[12]$")(c)] == \
        ["demo-00001", "demo-00002"]
    with pytest.raises(FilterError):
        parse_filter("([")
    by_latency = sort_cells(list(cells), "latency")
    assert by_latency[0].latency_ms == max(c.latency_ms or 0 for c in cells)


@pytest.mark.slow
@pytest.mark.timeout(300)  # its waits' deadlines only stop a broken run (one core: slow)
@pytest.mark.usefixtures("lasting_notes")
async def test_watch_follows_another_process_and_obeys_write(cfg, tmp_path):
    db = tmp_path / "runs.db"
    env = {**os.environ, "SWARM_TUI_DB": str(db), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    proc = subprocess.Popen(
        # calls of 800 ms: the run lasts ≥ 60 s at 20 in flight however fast the machine
        # (at 150 ms, one core shared with three test workers finished it before the pause
        # was pressed; at 400 ms, before the second console's concurrency step, once)
        [sys.executable, "-m", "swarm_tui", "run", "--demo", "1500", "--headless", "--quiet",
         "--concurrency", "20", "--sim-profile", "fixed:800", "--sim-rate-429", "0",
         "--sim-rate-503", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL)
    try:
        def running() -> bool:  # the other process's run is stored and under way (state)
            if not db.exists():
                return False
            try:
                with sqlite3.connect(db) as c:
                    return bool(c.execute("SELECT COUNT(*) FROM runs r JOIN results x ON "
                                          "x.run_id = r.id WHERE r.status='running'")
                                .fetchone()[0])
            except sqlite3.Error:
                return False

        await wait_for(running, 60)
        ro = StoreSource(db, None)
        await ro.open()
        app = SwarmApp(ro, db_target=db, refresh_s=0.2, readonly=True)
        async with app.run_test() as pilot:
            await wait_for(lambda: app.snapshot is not None and app.snapshot.done > 0)
            first = app.snapshot.done
            await wait_for(lambda: app.snapshot.done > first + 50)  # catching up
            assert app.snapshot.source == "watch" and app.snapshot.status == "running"
            # the executor's real in-flight count, from its heartbeat (it used to read 0)
            await wait_for(lambda: app.snapshot.in_flight > 0)
            # the agents view of a watcher: the executor's calls in flight, one per slot,
            # never more slots than its concurrency
            await wait_for(lambda: sum(x.cell is not None for x in app.snapshot.slots) >= 5)
            assert len(app.snapshot.slots) == 20
            await pilot.press("p")  # read-only watch: refused — the refusal arrives first
            await wait_for(lambda: notes(app, "read-only") >= 1, what="the refusal")
            assert not isinstance(app.screen, ConfirmScreen) and app.snapshot.status != "paused"
        await ro.close()
        rw = StoreSource(db, ro.run_id, write=True)
        await rw.open()
        app = SwarmApp(rw, db_target=db, refresh_s=0.2)
        async with app.run_test() as pilot:
            await wait_for(lambda: app.snapshot is not None and app.snapshot.done > 0)
            await pilot.press("plus", "plus")  # two fast steps from 20, through the store
            await wait_for(lambda: app.snapshot.concurrency == 40, seen=lambda: (
                app.snapshot.status, app.snapshot.concurrency, app.snapshot.done))
            await pilot.press("p")  # queued for the runner through the control table
            raw = sqlite3.connect(db)

            def live() -> dict:
                import json
                row = raw.execute("SELECT live_json, heartbeat_at FROM runs").fetchone()
                return {**json.loads(row[0] or "{}"), "beat": row[1]}

            # paused and drained, as the executor itself reports it
            status = "SELECT status FROM runs"
            assert raw.execute(status).fetchone()[0] == "running"  # still to pause
            await wait_for(lambda: live().get("paused") and live().get("in_flight") == 0,
                           seen=lambda: (raw.execute(status).fetchone()[0], live()))
            paused_at = raw.execute("SELECT COUNT(*) FROM results").fetchone()[0]
            beat = live()["beat"]
            await wait_for(lambda: live()["beat"] > beat)  # two heartbeats later …
            beat = live()["beat"]
            await wait_for(lambda: live()["beat"] > beat)
            # … nothing more was sent
            assert raw.execute("SELECT COUNT(*) FROM results").fetchone()[0] == paused_at
            assert rw.paused
            await pilot.press("p")  # resume
            await wait_for(lambda: raw.execute(
                "SELECT COUNT(*) FROM events WHERE kind='control'").fetchone()[0] >= 2)
            await wait_for(lambda: any("resumed (by" in d for (d,) in raw.execute(
                "SELECT detail_json FROM events WHERE kind='control'")))
            # each command once, in words, with who sent it (it was logged twice, once
            # as raw JSON)
            said = [d for (d,) in raw.execute("SELECT detail_json FROM events WHERE "
                                              "kind='control' ORDER BY id")]
            assert [d.split(" (by ")[0] for d in said if "by" in d] == [
                "concurrency=30", "concurrency=40", "paused", "resumed"], said
            assert not any("{" in d for d in said), said
            raw.close()
        await rw.close()
    finally:
        proc.wait(120)
    assert proc.returncode in (0, 3), proc.stderr.read()
    final = StoreSource(db, ro.run_id, replay=True)
    await final.open()
    snap = await final.snapshot()
    assert snap.status == "finished" and snap.done == 1500
    await final.close()


@pytest.mark.slow
async def test_demo_key_starts_a_swarm_from_the_bare_console(cfg, tmp_path):
    from swarm_tui.workload import demo_tasks as demo

    db = tmp_path / "runs.db"

    def start() -> LiveSource:
        opts = RunOptions(sim=SimSettings(profile="fixed:50", rate_429=0, rate_503=0))
        return LiveSource(cfg, opts, demo(100), db)

    app = SwarmApp(None, start_source=start, db_target=db, refresh_s=0.1, idle_message="press D")
    async with app.run_test() as pilot:
        await wait_for(lambda: "press D" in screen_text(app))  # the idle console, drawn
        assert app.source is None
        await pilot.press("D")
        assert isinstance(app.source, LiveSource)
        await wait_for(lambda: app.snapshot is not None and app.snapshot.status == "finished", 20)
        assert app.snapshot.done == 100 and app.snapshot.simulated
        await pilot.press("D")  # a second demo is refused while one is loaded
        await pilot.press("q")
    assert app.return_code == 0


@pytest.mark.slow
async def test_grid_navigation_keys():
    app = SwarmApp(FixedSource(mid_run_snapshot(1000)), refresh_s=10)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: app.snapshot is not None)
        await app.tick()
        grid = app.screen.query_one(TaskGrid)
        assert app.view == "agents" and not grid.display  # the agents view comes first
        await pilot.press("v")  # every task: the grid, focused
        await wait_for(lambda: grid.display and app.focused is grid)
        cols = grid.columns
        assert cols == 39 and grid.cursor == 0  # 80 columns less the scrollbar
        await pilot.press("right", "right", "down")
        assert grid.cursor == 2 + cols
        await pilot.press("left", "up")
        assert grid.cursor == 1
        await pilot.press("pagedown")
        assert grid.cursor == 1 + cols * grid.size.height
        await pilot.press("end")
        assert grid.cursor == 999 and grid.scroll_offset.y > 0  # scrolled to the last row
        await pilot.press("pageup", "home")
        assert grid.cursor == 0 and grid.scroll_offset.y == 0


@pytest.mark.slow
async def test_history_replays_and_compares_stored_runs(stored_runs_db):
    from swarm_tui.ui.screens import TextScreen

    app = SwarmApp(None, db_target=stored_runs_db, refresh_s=0.1)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("h")
        await wait_for(lambda: isinstance(app.screen, RunsScreen))
        await pilot.press("m", "down", "c")
        await wait_for(lambda: isinstance(app.screen, TextScreen))
        assert "latency p95" in app.screen.text and "change" in app.screen.text
        await pilot.press("escape")
        await pilot.press("enter")  # replay the selected run from its rows
        await wait_for(lambda: app.snapshot is not None)
        assert app.snapshot.source == "replay" and app.snapshot.status == "finished"
        # at its end, through the replay's timeline (as `swarm-tui replay RUN` opens it):
        # the moment is the run's end and one step back needs no second read of the run
        source = app.source
        assert source is not None and source.span() is not None
        assert source.at == source.span()[1]
        timeline = source._timeline
        assert timeline is not None
        start, end = source.span()
        await pilot.press("comma")
        await wait_for(lambda: source.at == max(end - 1.0, start))
        assert source._timeline is timeline


def test_dashboard_no_color(snap_compare, monkeypatch):
    """NO_COLOR: Textual renders monochrome; the grid's glyphs still tell the states apart."""
    monkeypatch.setenv("NO_COLOR", "1")

    async def settle(pilot):
        from tests.unit.test_ui_snapshots import settle as settle_dashboard

        await settle_dashboard(pilot)

    app = SwarmApp(FixedSource(mid_run_snapshot()), refresh_s=10, view="tasks")
    assert app.no_color
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle)


@pytest.mark.slow
async def test_next_failed_copy_id_and_the_scrollable_log():
    from swarm_tui.ui.widgets import EventLog

    snap = mid_run_snapshot(1000)
    failed = [i for i, c in enumerate(snap.cells) if c.state == "failed"]
    assert len(failed) >= 2
    app = SwarmApp(FixedSource(snap), refresh_s=10)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: app.snapshot is not None)
        await app.tick()
        grid = app.screen.query_one(TaskGrid)
        await pilot.press("f")
        assert grid.cursor == failed[0] and grid.has_focus
        await pilot.press("f")
        assert grid.cursor == failed[1]
        await pilot.press("y")  # OSC 52 through the driver; Textual keeps what it copied
        assert app.clipboard == snap.cells[failed[1]].task_id
        log = app.screen.query_one(EventLog)
        await pilot.press("l")
        assert log.has_focus and not log.auto_scroll  # held still to be read back
        await pilot.press("G")
        assert log.auto_scroll and grid.has_focus


@pytest.mark.slow
async def test_a_replayed_run_shows_its_own_log_not_the_previous_runs(stored_runs_db):
    from swarm_tui.ui.widgets import EventLog

    source = FixedSource(mid_run_snapshot(100))
    app = SwarmApp(source, db_target=stored_runs_db, refresh_s=0.1)
    async with app.run_test(size=(100, 30)) as pilot:
        log = app.screen.query_one(EventLog)
        await wait_for(lambda: any("RETRY  demo-" in s.text for s in log.lines))
        source.active = False  # that run ended: replay is allowed
        await pilot.press("h")
        await wait_for(lambda: isinstance(app.screen, RunsScreen))
        await pilot.press("enter")
        await wait_for(lambda: app.snapshot is not None and app.snapshot.source == "replay")
        # the log redrawn from the replay's own lines (as many as it holds)
        await wait_for(lambda: len(log.lines) == len(app.snapshot.log))
        assert not any("RETRY  demo-" in s.text for s in log.lines)


@pytest.mark.slow
async def test_a_stored_live_run_lets_answers_go_and_the_detail_reads_them_back(cfg, tmp_path):
    """The runner of a stored run keeps no answers (memory would grow ~4.8 KB a task): the
    detail view of a finished task reads its answer from the store."""
    source = live(cfg, tmp_path, n=150, profile="fixed:20")
    app = SwarmApp(source, db_target=tmp_path / "runs.db", refresh_s=0.1)
    async with app.run_test():
        await wait_for(lambda: source.outcome is not None, 60)
        agents = source.runner.records
        assert all(a.final and a.response_text is None for a in agents)
        detail = await source.detail(agents[7].seq)
        assert detail is not None and detail.state == "succeeded"
        with sqlite3.connect(tmp_path / "runs.db") as raw:
            stored = raw.execute("SELECT response_text FROM results WHERE seq=?",
                                 (agents[7].seq,)).fetchone()[0]
            task_json = raw.execute("SELECT task_json FROM tasks WHERE seq=?",
                                    (agents[7].seq,)).fetchone()[0]
        assert stored and detail.response_text == stored
        # nor prompts: the runner held only a head, the detail reads the prompt back too
        assert all(a.body is None for a in agents)
        assert detail.prompt and detail.prompt == json.loads(task_json)["prompt"]


@pytest.mark.slow
async def test_a_finished_runs_charts_stop_with_it(cfg, tmp_path):
    """A finished live run's throughput chart and calls/s stay as the run ended them — as
    its replay and `watch` show them — not a chart emptying second by second after it."""
    source = live(cfg, tmp_path, n=200, profile="fixed:20")
    app = SwarmApp(source, db_target=tmp_path / "runs.db", refresh_s=0.1)
    async with app.run_test():
        await wait_for(lambda: source.outcome is not None, 60)
        ended = await source.snapshot()
        await asyncio.sleep(2.5)  # the chart's window would have moved on by two seconds
        later = await source.snapshot()
    assert ended is not None and later is not None
    assert sum(ended.sparkline) == 200  # every completion within the last minute
    assert later.sparkline == ended.sparkline and later.calls_per_s == ended.calls_per_s


def test_a_snapshot_never_carries_a_cell_not_seen_yet():
    """Cells arrive by index from the engine thread; a gap (an index not seen yet) is
    skipped, never handed to the grid or the filter as None."""
    from swarm_tui.engine.snapshot import LiveMetrics, TaskCell, metrics_snapshot
    from swarm_tui.settings.sections import SlaConfig

    m = LiveMetrics()
    m.put_cell(3, TaskCell(3, "t3", "queued", "m", "b", None, None, 0, None))
    m.put_cell(0, TaskCell(0, "t0", "queued", "m", "b", None, None, 0, None))
    snap = metrics_snapshot(m, run_id="r", simulated=True, gateways=("sim",), status="running",
                            elapsed_s=1.0, total=4, in_flight=0, concurrency=1,
                            sla=SlaConfig(), tasks_per_day=1, client_bound=False)
    assert [c.task_id for c in snap.cells] == ["t0", "t3"]
    assert snap.counts["queued"] == 2


@pytest.mark.slow
async def test_the_agents_view_shows_each_slots_call_and_keeps_it_in_place(cfg, tmp_path):
    from swarm_tui.ui.agents import AgentsView, fit

    source = live(cfg, tmp_path, n=3000)
    app = SwarmApp(source, db_target=tmp_path / "runs.db", refresh_s=0.1)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: app.snapshot is not None and app.snapshot.in_flight >= 10
                       and sum(s.cell is not None for s in app.snapshot.slots) >= 10, 60)
        snap = app.snapshot
        view = app.screen.query_one(AgentsView)
        assert view.display and len(snap.slots) == snap.concurrency == 20
        working = {s.slot: s.cell.seq for s in snap.slots if s.cell is not None}
        # one call per slot, each a task running or streaming right now
        assert len(set(working.values())) == len(working)
        assert all(s.cell.state in ("running", "streaming") and s.started_s is not None
                   for s in snap.slots if s.cell is not None)
        # a slot keeps its task while the task's call lasts (agents keep their place)
        await wait_for(lambda: app.snapshot is not snap)
        later = app.snapshot
        for s in later.slots:
            if s.cell is not None and s.cell.seq in working.values():
                assert working.get(s.slot) == s.cell.seq
        # the whole swarm on one screen: 20 agents at 80×24, the widest cells
        assert fit(len(later.slots), view.size.width, view.size.height - 1)[0] == 28
        header = view.render_line(0).text
        assert "agents:" in header and "of 20 working" in header
        await pilot.press("v")
        await wait_for(lambda: not view.display)
    await source.shutdown()


def test_the_agents_view_fits_140_agents_at_80x24():
    from swarm_tui.engine.snapshot import SlotCell
    from swarm_tui.ui.agents import cell_text, fit

    w, cols = fit(140, 80, 12)  # the grid area of an 80×24 dashboard, less its header
    assert -(-140 // cols) <= 12 and w == 6
    cell = mid_run_snapshot().cells[60]
    assert cell_text(SlotCell(0, cell, 0.5, 2000), 1.8, 28).split()[1:] == [
        cell.task_id, "1.3s", "500t"]
    assert cell_text(SlotCell(0, None, None, None), 1.8, 6) == "·     "


async def test_more_agents_than_cells_says_how_many_are_not_shown():
    import dataclasses
    import re

    from swarm_tui.engine.snapshot import SlotCell
    from swarm_tui.ui.agents import AgentsView

    snap = mid_run_snapshot()
    cell = snap.cells[60]
    snap = dataclasses.replace(snap, slots=tuple(SlotCell(i, cell, 1.0, 40) for i in range(1000)))
    app = SwarmApp(FixedSource(snap), refresh_s=10)
    async with app.run_test(size=(80, 24)):
        await wait_for(lambda: app.snapshot is not None)
        await app.tick()
        view = app.screen.query_one(AgentsView)
        await wait_for(lambda: len(view.slots) == 1000)
        rows = view.size.height - 1
        lines = [view.render_line(y).text for y in range(1, rows + 1)]
        shown = sum(line.count("◐") for line in lines)
        more = re.search(r"\+(\d+) more", lines[-1])
        assert more is not None and shown + int(more.group(1)) == 1000, lines[-1]


@pytest.mark.slow
@pytest.mark.usefixtures("lasting_notes")
async def test_cancelling_an_agent_whose_task_id_looks_like_markup(cfg, tmp_path):
    """A workload's task id is text: `job[/x]` in the Cancel dialog raised MarkupError and
    killed the console."""
    from swarm_tui.workload import Task

    # calls of a minute: the agent selected is still running or queued when its cancel
    # arrives, however slow the machine (with 400 ms calls it had finished first on one
    # core, and a finished agent is not cancelled)
    opts = RunOptions(sim=SimSettings(profile="fixed:60000", rate_429=0, rate_503=0),
                      concurrency=5)
    tasks = [Task(id=f"job[/x]{i}[bold]", prompt="p") for i in range(300)]
    source = LiveSource(cfg, opts, tasks, tmp_path / "runs.db")
    app = SwarmApp(source, db_target=tmp_path / "runs.db", refresh_s=0.1, view="tasks")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(lambda: source.runner is not None and source.runner.in_flight > 0)
        grid = app.screen.query_one(TaskGrid)
        # the grid filled first (on one core the keys once came before its cells)
        await wait_for(lambda: len(grid.cells) == 300, what="every task in the grid")
        grid.focus()
        await pilot.press("end")
        await wait_for(lambda: grid.selected is not None, what="a selected cell")
        await pilot.press("c")  # its cancel
        await wait_for(lambda: isinstance(app.screen, ConfirmScreen), what="the dialog")
        cell = grid.selected
        assert cell is not None and cell.task_id.startswith("job[/x]")
        from textual.widgets import Label

        label = app.screen.query_one("#confirm-question", Label)
        assert f"Cancel agent {cell.task_id}?" in str(label.render())  # as text
        await pilot.press("y")
        await wait_for(lambda: source.runner.records[cell.seq].state == "cancelled",
                       what="the agent cancelled")
        await wait_for(lambda: notes(app, f"cancel requested for {cell.task_id}") == 1,
                       what="the notice, as text")
        await pilot.press("x", "y")
        await wait_for(lambda: not source.active, what="the run cancelled")


@pytest.mark.parametrize("readonly", [False, True])
async def test_the_palette_lists_each_command_once_and_only_what_can_be_done(readonly):
    app = SwarmApp(FixedSource(mid_run_snapshot(), readonly=readonly), refresh_s=10)
    async with app.run_test():
        await wait_for(lambda: app.snapshot is not None)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert titles and len(titles) == len(set(titles)), titles
        assert sum("Quit" in t for t in titles) == 1
        controls = [t for t in titles if t.startswith(("Pause", "Raise", "Lower", "Cancel"))]
        assert (controls == []) == readonly, controls
        assert not any("demo" in t for t in titles)  # a run is loaded: no demo to start


def test_the_command_line_parses_k9s_commands():
    from swarm_tui.ui.command_line import CommandError, Parsed, parse

    assert parse(":runs") == parse("history") == Parsed("history")
    assert parse(":ca") == Parsed("canary")  # a unique prefix
    assert parse(":replay 20261205-0001") == Parsed("replay", "20261205-0001")
    assert parse(":q") == parse("quit") == Parsed("request_quit")
    assert parse(":filter state:failed model:kimi") == Parsed("filter_to",
                                                              "state:failed model:kimi")
    for bad, says in ((":r", "could be"), (":nope", "unknown command"),
                      (":replay", "needs an argument"), (":keys now", "takes no argument"),
                      (":", "empty command")):
        with pytest.raises(CommandError, match=says):
            parse(bad)


async def test_history_at_80_columns_keeps_its_figures_whole(stored_runs_db):
    """The history's cost read `$0.` at 80 columns: columns now go by priority (the name
    first), and what is shown fits, whole; at 160 columns every column is back."""
    from textual.widgets import DataTable

    app = SwarmApp(db_target=stored_runs_db, refresh_s=10)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("h")
        await wait_for(lambda: isinstance(app.screen, RunsScreen) and app.screen.items)
        table = app.screen.query_one(DataTable)
        await wait_for(lambda: table.columns, what="the history's columns")
        labels = [str(c.label) for c in table.columns.values()]
        assert {"run", "status", "tasks", "cost", "call ok"} <= set(labels), labels
        assert "name" not in labels
        widths = sum(c.get_render_width(table) for c in table.columns.values())
        assert widths <= 80, (labels, widths)
        cost = labels.index("cost")
        assert table.get_row_at(1)[cost] == "$1,235"  # fmt.usd: whole dollars past $1,000
        await pilot.resize_terminal(160, 40)
        await wait_for(lambda: len(table.columns) == 8, what="every column at 160")


async def test_arrows_move_over_the_agents_in_the_default_view():
    """The agents view (the default) had no focus: arrows moved nothing visible. Now they
    move a cursor over the agents and d / enter describe the selected agent's task
    (issue 36)."""
    from swarm_tui.ui.agents import AgentsView

    asked: list[int] = []

    class Source(FixedSource):
        async def detail(self, seq: int):
            asked.append(seq)  # which task the console asked about
            return await super().detail(seq)

    app = SwarmApp(Source(mid_run_snapshot()), refresh_s=10, view="agents")
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.screen.query_one(AgentsView)
        await wait_for(lambda: view.slots and app.focused is view, what="the agents, focused")
        await pilot.press("right", "right")
        assert view.cursor == 2
        await pilot.press("down")
        assert view.cursor == 2 + view._columns()
        await pilot.press("home")
        assert view.cursor == 0
        busy = next(i for i, s in enumerate(view.slots) if s.cell is not None)
        await pilot.press(*["right"] * busy)
        chosen = view.selected
        assert chosen is not None
        await pilot.press("d")
        await wait_for(lambda: isinstance(app.screen, DetailScreen))
        assert asked == [chosen.seq]
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, DetailScreen))
        assert app.view == "agents"  # describing did not switch the view
