"""A finished run's replay timeline is stored once, at its end (issue 35: any moment of a
100,000-task run on screen in ≤ 300 ms): a replay read from it shows exactly what one
built from the rows shows, at every moment and after steps both ways; a stored timeline
that no longer matches its run, or that is not one, is built again from the rows."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import psycopg
import pytest

from swarm_tui.run_sources import StoreSource
from tests.conftest import demo_run, swarm

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A real run of 400 tasks over ~4 s with failed calls, retries and 429 cooldowns."""
    db, run_id, _env = demo_run(tmp_path_factory.mktemp("replay_index"), "400", "--rate",
                                "100", "--sim-rate-503", "0.04", "--sim-rate-429", "0.03")
    return db, run_id


def _index_rows(db) -> list[tuple]:
    c = sqlite3.connect(db)
    try:
        return c.execute("SELECT run_id, results, attempts, events, length(data) "
                         "FROM replay_index").fetchall()
    finally:
        c.close()


def _drop_index(db) -> None:
    c = sqlite3.connect(db)
    c.execute("DELETE FROM replay_index")
    c.commit()
    c.close()


def _span(db) -> tuple[float, float]:
    c = sqlite3.connect(db)
    try:
        return c.execute("SELECT started_at, finished_at FROM runs").fetchone()
    finally:
        c.close()


def _seen(snap) -> dict:
    """Everything a moment shows: cells, figures, log, histogram, keys."""
    return {"agents": snap.cells, "counts": snap.counts, "in_flight": snap.in_flight,
            "latency": snap.latency_ms, "ttft": snap.ttft_ms, "calls": snap.calls,
            "success": (snap.success_rate, snap.call_success_rate), "cost": snap.cost_usd,
            "tokens": (snap.tokens_in, snap.tokens_out), "log": snap.log,
            "histogram": snap.histogram, "sparkline": snap.sparkline, "errors": snap.errors,
            "slots": [(s.cell, s.started_s) for s in snap.slots if s.cell is not None],
            "keys": [(k.fingerprint, k.state, k.calls, k.in_flight, k.rate_limited, k.errors)
                     for k in snap.keys], "status": snap.status, "elapsed": snap.elapsed_s}


async def _walk(db, run_id: str, moments: list[float]) -> list[dict]:
    """One replay opened at the first moment, then moved to each of the others."""
    source = StoreSource(db, run_id, at=moments[0])
    await source.open()
    try:
        seen = [_seen(await source.snapshot())]
        for at in moments[1:]:
            source.seek(at)
            seen.append(_seen(await source.snapshot()))
    finally:
        await source.close()
    return seen


async def test_a_replay_from_the_stored_timeline_shows_what_the_rows_show(stored):
    db, run_id = stored
    rows = _index_rows(db)
    assert len(rows) == 1 and rows[0][0] == run_id and rows[0][4] > 0  # stored at its end
    start, end = _span(db)
    # forward, back by small steps, a jump back to the start, a jump to the end, back
    moments = ([start + (end - start) * i / 17 for i in range(18)]
               + [end - 0.3 * i for i in range(1, 9)] + [start + 0.05, end, start + 1.7])
    from_index = await _walk(db, run_id, moments)
    _drop_index(db)
    from_rows = await _walk(db, run_id, moments)
    assert len(_index_rows(db)) == 1  # built from the rows, and stored again
    for at, a, b in zip(moments, from_index, from_rows, strict=True):
        assert a == b, f"{at - start:.2f} s into the run"
    assert from_index[0]["counts"].get("queued", 0) == 400  # the start: nothing done yet
    assert sum(from_index[len(moments) - 2]["counts"].get(s, 0)
               for s in ("succeeded", "failed")) == 400  # the end: every task


async def test_a_stored_timeline_that_no_longer_matches_its_run_is_built_again(stored):
    """A row added after the timeline was stored (a resume, a late alert delivery) makes it
    another run's: the replay shows the new row, and stores the run as it is now."""
    db, run_id = stored
    _start, end = _span(db)
    c = sqlite3.connect(db)
    c.execute("INSERT INTO events (run_id, at, kind, actor, detail_json) VALUES "
              "(?, ?, 'control', NULL, 'late line for the replay')", (run_id, end - 0.01))
    c.commit()
    c.close()
    events_before = _index_rows(db)[0][3]
    seen = (await _walk(db, run_id, [end]))[0]
    assert any("late line for the replay" in line for line in seen["log"])
    assert _index_rows(db)[0][3] == events_before + 1


async def test_a_blob_that_is_not_a_timeline_is_built_again_from_the_rows(stored):
    db, run_id = stored
    start, end = _span(db)
    mid = start + (end - start) / 2
    good = await _walk(db, run_id, [mid])
    c = sqlite3.connect(db)
    blob = bytes(c.execute("SELECT data FROM replay_index").fetchone()[0])
    c.close()
    size = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + size])
    header["task_ids"] = header["task_ids"][:-1]  # its own format, one column short
    head = json.dumps(header).encode()
    short = len(head).to_bytes(8, "little") + head + blob[8 + size:]
    for junk in (b"", b"\x00" * 64, b"\xff" * 8 + b"{}", json.dumps({"format": 99}).encode(),
                 short, blob[:-8]):
        c = sqlite3.connect(db)
        c.execute("UPDATE replay_index SET data=?", (junk,))
        c.commit()
        c.close()
        assert await _walk(db, run_id, [mid]) == good, junk[:16]
        assert _index_rows(db)[0][4] > 1_000  # replaced by a real one


async def test_on_postgresql_the_run_stores_its_timeline_and_a_reader_replays_from_it(
        pg_server, tmp_path):
    """The executor (the roles' executor) stores the timeline on the server; a reader,
    who may not write one, opens any moment from it, and the same moments built from the
    rows (after the stored one is dropped) read alike."""
    from tests.conftest import new_pg_database, pg_login, raw_rows

    target = new_pg_database(pg_server)
    r = swarm("--db", target.url, "db", "init", "--roles")
    assert r.returncode == 0, r.stderr
    reader = pg_login(pg_server, target, "replay_ro")
    r = swarm("--db", target.url, "run", "--demo", "200", "--rate", "100", "--sim-rate-503",
              "0.05", "--headless", "--quiet", "--json", env={"XDG_CONFIG_HOME": str(tmp_path)},
              timeout=120)
    assert r.returncode in (0, 3), r.stderr
    run_id = json.loads(r.stdout)["run_id"]
    (stored,) = raw_rows(target, "SELECT run_id, results, attempts, octet_length(data) "
                                 "FROM replay_index")
    assert stored[0] == run_id and stored[1] == 200 and stored[3] > 0
    start, end = raw_rows(target, "SELECT started_at, finished_at FROM runs")[0]
    moments = [start + (end - start) * i / 6 for i in range(7)] + [start + 0.5]
    with psycopg.connect(reader.url) as ro:  # the reader reads the stored one …
        assert ro.execute("SELECT COUNT(*) FROM replay_index").fetchone()[0] == 1
        assert not ro.execute("SELECT has_table_privilege('replay_index', 'UPDATE')"
                              ).fetchone()[0]  # … and may not write one
    from_index = await _walk(reader, run_id, moments)
    with psycopg.connect(target.url, autocommit=True) as admin:
        admin.execute("DELETE FROM replay_index")
    from_rows = await _walk(reader, run_id, moments)  # a reader builds it, and cannot keep it
    assert raw_rows(target, "SELECT COUNT(*) FROM replay_index")[0][0] == 0
    assert from_index == from_rows
    assert sum(from_index[-2]["counts"].get(s, 0) for s in ("succeeded", "failed")) == 200


def test_a_store_that_refuses_the_timeline_does_not_fail_the_run(tmp_path):
    """The timeline is a convenience: a database that refuses it at the run's end (here a
    trigger, as a full disk or a lost link would) leaves the run, its summary and its
    exit code as they were, and its replay is built from the rows."""
    env = {"SWARM_TUI_DB": str(tmp_path / "runs.db"), "XDG_CONFIG_HOME": str(tmp_path / "x")}
    r = swarm("run", "--demo", "5", "--headless", "--quiet", env=env, timeout=60)
    assert r.returncode in (0, 3), r.stderr  # 3: the demo missed its SLA (its own verdict)
    c = sqlite3.connect(tmp_path / "runs.db")
    c.execute("DELETE FROM replay_index")
    c.execute("CREATE TRIGGER no_timeline BEFORE INSERT ON replay_index "
              "BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END")
    c.commit()
    c.close()
    r = swarm("run", "--demo", "50", "--headless", "--quiet", "--json", env=env, timeout=60)
    assert r.returncode in (0, 3), r.stderr  # 3: the demo missed its SLA (its own verdict)
    assert "Traceback" not in r.stderr and r.stderr.strip() == ""
    summary = json.loads(r.stdout)
    assert summary["succeeded"] + summary["failed"] == 50
    assert _index_rows(tmp_path / "runs.db") == []
    r = swarm("replay", summary["run_id"], "--at", "end", "--screenshot",
              str(tmp_path / "end.svg"), env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "end.svg").stat().st_size > 1_000 and "50/50" in r.stdout


def test_a_ctrl_c_while_the_timeline_is_stored_skips_it_and_the_run_ends_as_it_did(tmp_path):
    """The run is stored and summarised before its timeline is: a Ctrl-C then (1.7 s at
    100,000 tasks) used to end a finished run as `interrupted` with no summary printed.
    Here the signal lands as the save starts, in a process of its own: the save is
    skipped, nothing is raised, and the first replay builds the timeline from the rows."""
    db, run_id, env = demo_run(tmp_path, "50")
    _drop_index(db)
    code = ("import asyncio, os, signal, sys\n"
            "from pathlib import Path\n"
            "from swarm_tui.run.stored_run import keep_replay\n"
            "from swarm_tui.store.db import open_db\n"
            "async def main():\n"
            "    conn = await open_db(Path(sys.argv[1]), create=False)\n"
            "    asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGINT)\n"
            "    try:\n"
            "        await keep_replay(conn, sys.argv[2], Path(sys.argv[1]))\n"
            "    finally:\n"
            "        await conn.close()\n"
            "    print('the run ends as it did')\n"
            "asyncio.run(main())\n")
    r = subprocess.run([sys.executable, "-c", code, str(db), run_id], capture_output=True,
                       text=True, timeout=60, env={**os.environ, **env})
    assert r.returncode == 0 and "the run ends as it did" in r.stdout, r.stderr
    assert _index_rows(db) == []  # skipped, not half written
    shot = swarm("replay", run_id, "--at", "end", "--screenshot", str(tmp_path / "end.svg"),
                 env=env, timeout=60)
    assert shot.returncode == 0 and "50/50" in shot.stdout, shot.stderr


async def test_a_replays_first_failed_call_is_the_instant_the_rows_give(stored):
    """The time bar's first failure is read off the timeline (the store's query walks
    every call of the run): the same instant, to the bit."""
    from swarm_tui.store.moments import notable_moments

    db, run_id = stored
    source = StoreSource(db, run_id, at=_span(db)[0])
    await source.open()
    try:
        await source.snapshot()
        from_timeline = await source.moments()
        from_rows = await notable_moments(source.conn, source.record, limit=50)
    finally:
        await source.close()
    assert "first failed call" in [what for _at, what in from_rows]
    assert from_timeline == from_rows
