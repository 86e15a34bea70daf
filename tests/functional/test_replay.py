"""A stored run replayed at a moment (issue 35): what the console shows at T is what the
store says had happened by T — at every one of 24 moments — and TIME takes every form
the on-call pastes."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from swarm_tui.run_sources import StoreSource
from tests.conftest import assert_one_line_error, demo_run, stored_snapshot, swarm

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """One real run of 500 tasks paced over ~5 s, 3 % of calls failing (retries)."""
    return demo_run(tmp_path_factory.mktemp("replay"), "500", "--rate", "100",
                    "--sim-rate-503", "0.03", "--sim-rate-429", "0")


def _truth(db, run_id: str, at: float) -> dict:
    c = sqlite3.connect(db)
    try:
        q = lambda sql: c.execute(sql, (run_id, at)).fetchone()[0]  # noqa: E731
        return {
            "succeeded": q("SELECT COUNT(*) FROM results WHERE run_id=? AND "
                           "finished_at <= ? AND state='succeeded'"),
            "failed": q("SELECT COUNT(*) FROM results WHERE run_id=? AND finished_at <= ? "
                        "AND state='failed'"),
            "calls": q("SELECT COUNT(*) FROM attempts WHERE run_id=? AND outcome IN "
                       "('ok', 'error') AND sent_at + COALESCE(latency_ms, 0) / 1000.0 <= ?"),
            "in_flight": c.execute(
                "SELECT COUNT(DISTINCT seq) FROM attempts WHERE run_id=? AND sent_at <= ? AND "
                "sent_at + COALESCE(latency_ms, 0) / 1000.0 > ?", (run_id, at, at)).fetchone()[0],
        }
    finally:
        c.close()


async def test_the_replay_at_each_moment_is_what_had_happened_by_then(stored):
    db, run_id, _env = stored
    c = sqlite3.connect(db)
    start, end = c.execute("SELECT started_at, finished_at FROM runs").fetchone()
    c.close()
    moments = [start + (end - start) * i / 23 for i in range(24)]
    done_before = -1
    for at in moments:
        snap = await stored_snapshot(db, run_id, at=at)
        assert snap is not None
        truth = _truth(db, run_id, at)
        got = {"succeeded": snap.counts.get("succeeded", 0),
               "failed": snap.counts.get("failed", 0), "calls": snap.calls,
               "in_flight": snap.in_flight}
        assert got == truth, (at - start, got, truth)
        working = sum(1 for cell in snap.cells if cell is not None and cell.state == "running")
        assert working == truth["in_flight"]
        assert snap.status == ("running" if at < end else "finished")
        assert snap.done >= done_before  # a moment later never shows less done
        done_before = snap.done
        assert all(not line.startswith(" ") or float(line.split("s ")[0]) <= at - start + 0.05
                   for line in snap.log)  # nothing logged after the moment
    assert done_before == 500  # the last moment is the end


async def test_the_consoles_percentiles_are_the_reports_to_the_millisecond(stored):
    """The console's p50/p95/p99 and TTFT (whole milliseconds from its histogram) are the
    report's exact nearest-rank figures rounded as the report prints them — truncated,
    one run's console read p95 277 where `report` and `run --json` said 278."""
    db, run_id, env = stored
    report = json.loads(swarm("report", run_id, "--json", env=env).stdout)
    snap = await stored_snapshot(db, run_id, replay=True)
    assert snap is not None
    lat, ttft = report["latency_ms"], report["ttft_ms"]
    assert snap.latency_ms == tuple(float(round(lat[p])) for p in ("p50", "p95", "p99"))
    assert snap.ttft_ms == tuple(float(round(ttft[p])) for p in ("p50", "p95"))


def test_every_form_of_time_opens_its_moment_and_a_bad_one_is_one_line(stored, tmp_path):
    db, run_id, env = stored
    c = sqlite3.connect(db)
    start = c.execute("SELECT started_at FROM runs").fetchone()[0]
    c.close()
    import time

    clock = time.strftime("%H:%M:%S", time.localtime(start + 2))
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + 2))
    for at in ("+2s", clock, iso, "start", "end", "first-failure"):
        shot = tmp_path / "m.svg"
        r = swarm("replay", run_id, "--at", at, "--screenshot", str(shot), "--size", "80x24",
                  env=env)
        assert r.returncode == 0, (at, r.stderr)
        assert shot.read_text().startswith("<svg") and f"run {run_id} at " in r.stdout
        if at in (clock, iso):  # a wall-clock time names that second, in UTC
            assert f"run {run_id} at {iso[:-1]}.000Z " in r.stdout, r.stdout
    for bad, says in (("+1h", "outside run"), ("yesterday", "not a moment"),
                      ("canary:abort", "no canary abort"), ("alert:sla_breach", "no sla_breach")):
        r = swarm("replay", run_id, "--at", bad, "--screenshot", str(shot), env=env)
        assert_one_line_error(r, 2, says)


def test_the_report_lists_the_runs_notable_moments_each_with_its_command(stored, tmp_path):
    _db, run_id, env = stored
    r = swarm("report", run_id, env=env)
    assert r.returncode in (0, 3), r.stderr
    lines = r.stdout.split("notable moments")[1].strip().splitlines()[1:]
    first = next(line for line in lines if "first failed call" in line)
    command = first[first.index("swarm-tui replay"):].split()
    opened = swarm(*command[1:], "--screenshot", str(tmp_path / "f.svg"), env=env)
    assert opened.returncode == 0, opened.stderr
    # the moment it opens includes its failure (to the second, it opened before it)
    per_call = re.search(r"^calls .* ok ([0-9.]+)% per call", opened.stdout, re.M)
    assert per_call and float(per_call.group(1)) < 100, opened.stdout
    # `runs --moments`: the same moments under the run's row, and in its JSON
    listed = swarm("runs", "--moments", env=env)
    assert listed.returncode == 0, listed.stderr
    head, row, *under = listed.stdout.splitlines()
    assert head.startswith("RUN") and row.startswith(run_id)
    assert " ".join(command) in listed.stdout and "first failed call" in under[1]
    data = json.loads(swarm("runs", "--moments", "--json", env=env).stdout)
    first_json = next(m for m in data[0]["moments"] if m["what"] == "first failed call")
    assert first_json["replay"] == " ".join(command) and data[0]["id"] == run_id
    assert "moments" not in json.loads(swarm("runs", "--json", env=env).stdout)[0]


async def test_scrubbing_moves_the_console_through_the_run(stored):
    """In a replay , . step a second, < > ten, [ ] jump between notable moments; every
    step shows what had happened by then (issue 35)."""
    from swarm_tui.ui.app import SwarmApp
    from tests.ui_fixtures import wait_for

    db, run_id, _env = stored
    c = sqlite3.connect(db)
    start, end = c.execute("SELECT started_at, finished_at FROM runs").fetchone()
    first_failure = c.execute("SELECT MIN(sent_at + COALESCE(latency_ms, 0) / 1000.0) FROM "
                              "attempts WHERE outcome='error'").fetchone()[0]
    c.close()
    source = StoreSource(db, run_id, at=start + 1.0)
    app = SwarmApp(source, db_target=db, refresh_s=0.2)

    def shows(at: float) -> bool:
        snap = app.snapshot
        truth = _truth(db, run_id, at)
        return (snap is not None and abs((source.at or 0) - at) < 1e-6
                and snap.counts.get("succeeded", 0) == truth["succeeded"]
                and snap.calls == truth["calls"])

    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(lambda: shows(start + 1.0), what="the first moment")
        await pilot.press("full_stop")
        await wait_for(lambda: shows(start + 2.0), what="a second later")
        await pilot.press("greater_than_sign")
        await wait_for(lambda: shows(min(start + 12.0, end)), what="ten seconds later")
        await pilot.press("less_than_sign", "less_than_sign")
        await wait_for(lambda: shows(start), what="back to the start (clamped)")
        await pilot.press("right_square_bracket")  # the next notable moment
        await wait_for(lambda: source.at is not None and abs(source.at - first_failure) < 1e-6,
                       what="the first failed call")
        await wait_for(lambda: shows(first_failure), what="the run at its first failure")
        assert "first failed call" in app.message


async def test_g_in_a_replay_of_a_run_still_executing_goes_live(tmp_path):
    """A replay at an earlier moment of a run another process executes: `G` watches it
    now. (On a finished run G stays the log's follow.)"""
    import os
    import subprocess
    import sys

    from swarm_tui.ui.app import SwarmApp
    from tests.ui_fixtures import wait_for

    db = tmp_path / "runs.db"
    env = {**os.environ, "SWARM_TUI_DB": str(db), "XDG_CONFIG_HOME": str(tmp_path / "x")}
    proc = subprocess.Popen([sys.executable, "-m", "swarm_tui", "run", "--demo", "3000",
                             "--rate", "60", "--headless", "--quiet"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        def started() -> tuple | None:
            if not db.exists():
                return None
            c = sqlite3.connect(db)
            try:
                return c.execute("SELECT r.id, r.started_at FROM runs r WHERE EXISTS "
                                 "(SELECT 1 FROM results WHERE run_id = r.id)").fetchone()
            except sqlite3.OperationalError:
                return None
            finally:
                c.close()

        await wait_for(started, what="the run's first stored result")
        run_id, started_at = started()
        app = SwarmApp(StoreSource(db, run_id, at=started_at + 0.5), refresh_s=0.2,
                       db_target=db, readonly=True)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(lambda: app.snapshot is not None, what="the replayed moment")
            assert app.source.kind == "replay" and app.check_action("go_live", ())
            shown = app.snapshot.counts["succeeded"]
            await pilot.press("G")
            await wait_for(lambda: app.source.kind == "watch" and app.snapshot is not None
                           and app.snapshot.counts["succeeded"] > shown,
                           what="the live run, past the replayed moment")
            assert app.snapshot.status == "running"
            assert app.source.at is None
    finally:
        proc.kill()
        proc.wait()
