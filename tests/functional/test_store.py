"""The store: migrations, bad files, batched writes, report = independent recomputation."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from swarm_tui.core.summary import summarize
from swarm_tui.errors import UserError
from swarm_tui.report.history import load_summary
from swarm_tui.run.recorder import RunRecorder
from swarm_tui.settings.sections import SlaConfig
from swarm_tui.store.claims import take_lock
from swarm_tui.store.db import open_db
from swarm_tui.store.runs import create_run, get_run
from swarm_tui.store.schema import MIGRATIONS, SCHEMA_VERSION
from swarm_tui.store.writer import StoreWriter
from tests.conftest import client_for, make_client, make_runner, raw_rows, tasks


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("start_version", range(SCHEMA_VERSION))
async def test_migrates_forward_from_every_earlier_version(tmp_path, start_version):
    path = tmp_path / "old.db"
    raw = sqlite3.connect(path)
    for v in range(start_version):
        raw.executescript(MIGRATIONS[v])
    raw.execute(f"PRAGMA user_version = {start_version}")
    if start_version >= 1:  # data written by that version must survive
        raw.execute("INSERT INTO runs (id, status, simulated, started_at, heartbeat_at, total, "
                    "workload_hash, config_json) VALUES ('old', 'finished', 1, 1, 1, 0, 'h', '{}')")
    raw.commit()
    raw.close()
    conn = await open_db(path)
    async with conn.execute("PRAGMA user_version") as cur:
        assert (await cur.fetchone())[0] == SCHEMA_VERSION
    async with conn.execute("SELECT name FROM sqlite_master WHERE type='table'") as cur:
        tables = {r[0] for r in await cur.fetchall()}
    assert {"runs", "tasks", "attempts", "events", "control"} <= tables
    if start_version >= 1:
        assert (await get_run(conn, "old", path)).status == "finished"
    await conn.close()


async def test_newer_schema_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "new.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE future (x)")
    raw.execute("PRAGMA user_version = 99")
    raw.commit()
    raw.close()
    before = _digest(path)
    with pytest.raises(UserError, match=r"schema version 99 is newer .* upgrade swarm-tui"):
        await open_db(path)
    assert _digest(path) == before


async def test_corrupt_file_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not sqlite at all" * 100)
    before = _digest(path)
    with pytest.raises(UserError, match="not a swarm-tui database or corrupt") as info:
        await open_db(path)
    assert str(path) in str(info.value) and info.value.exit_code == 2
    assert _digest(path) == before


async def test_unwritable_location(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="cannot create it"):
        await open_db(blocker / "sub" / "runs.db")


async def test_missing_db_for_readers(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        await open_db(tmp_path / "none.db", create=False)


async def _stored_run(sim_factory, path, n=400, **sim):
    server = sim_factory(profile=sim.pop("profile", "gateway"), **sim)
    conn = await open_db(path)
    async with client_for(server) as gw:
        work = tasks(n, prefix="s")
        runner = make_runner(gw, work, concurrency=60)
        claim = take_lock(path, "r1")
        await create_run(conn, "r1", runner.records, work, name="t", simulated=True,
                         config={"settings": {"sla": {"p95_ms": 350, "min_success": 0.99}}},
                         claim=claim)
        writer = StoreWriter(conn, path, "r1", runner, claim=claim, flush_interval=0.05,
                             max_rows=50)
        RunRecorder(writer, runner)
        writer.start()
        await runner.run()
        await writer.close("finished")
    return conn, path, runner, writer


@pytest.mark.slow
async def test_writer_stores_every_task_and_attempt_in_batches(sim_factory, db_target):
    conn, path, runner, writer = await _stored_run(sim_factory, db_target, rate_429=0.1,
                                                   retry_after_s=0.05)
    states = dict(raw_rows(path, "SELECT state, COUNT(*) FROM task_results GROUP BY state"))
    expected = {k: v for k, v in runner.counts.items() if v}
    assert states == expected and sum(states.values()) == 400
    stored_attempts = raw_rows(path, "SELECT COUNT(*) FROM attempts")[0][0]
    assert stored_attempts == sum(len(a.attempts) for a in runner.records)
    assert stored_attempts > 400  # some 429 retries happened
    rate_limited = raw_rows(
        path, "SELECT COUNT(*) FROM attempts WHERE error_class='rate_limited' AND retry_wait_s=?",
        (0.05,))[0][0]
    assert rate_limited > 0
    assert writer.stats.flushes > 3 and writer.stats.max_pending >= 1
    assert raw_rows(path, "SELECT status, wall_ms > 0 FROM runs") == [("finished", 1)]
    await conn.close()


def _nearest_rank(values, p):
    values = sorted(values)
    return values[max(1, math.ceil(p / 100 * len(values))) - 1]


@pytest.mark.slow
async def test_report_equals_independent_recomputation_from_raw_rows(sim_factory, db_target):
    conn, path, runner, _ = await _stored_run(sim_factory, db_target, n=300)
    summary = await load_summary(conn, await get_run(conn, "r1", path))
    rows = raw_rows(path, "SELECT latency_ms, ttft_ms, cost_usd, tokens_in, tokens_out, model "
                    "FROM task_results WHERE state='succeeded'")
    lat = [r[0] for r in rows]
    ttft = [r[1] for r in rows]
    for p, field in ((50, "p50"), (95, "p95"), (99, "p99")):
        assert getattr(summary.latency_ms, field) == _nearest_rank(lat, p)
    assert summary.ttft_ms.p95 == _nearest_rank(ttft, 95)
    # cost: recomputed from stored tokens and the price table, to the cent and beyond
    prices = {"deepseek-v3.2": (0.28, 0.42), "kimi-k2.5": (0.15, 2.50)}
    expected = sum((r[3] * prices[r[5]][0] + r[4] * prices[r[5]][1]) / 1e6 for r in rows)
    assert summary.cost_usd == pytest.approx(expected, rel=1e-12)
    assert summary.tokens.input == sum(r[3] for r in rows)
    by_model = {m: [r[0] for r in rows if r[5] == m] for m in prices}
    for model, values in by_model.items():
        if values:
            assert summary.by_model[model].latency_ms.p95 == _nearest_rank(values, 95)
    # the summary computed live from the engine's records equals the stored one
    live = summarize(runner.records, run_id="r1", sla=SlaConfig(), wall_ms=runner.wall_ms,
                     name="t", status="finished", simulated=True, started_at=summary.started_at,
                     client_lag=(runner.loop_lag.run_p95_ms(), runner.loop_lag.run_max_ms()))
    assert live == summary and summary.succeeded == 300
    await conn.close()


@pytest.mark.slow
async def test_closing_during_a_flush_loses_nothing(db_target):
    """close() while the loop is mid-flush: every row still lands (it once rolled back)."""
    from swarm_tui.core import events as ev
    from swarm_tui.core.records import Attempt
    from swarm_tui.core.states import SUCCEEDED
    from swarm_tui.gateway.client import GatewayClient

    path = db_target
    conn = await open_db(path)
    gw = GatewayClient("sim", "http://127.0.0.1:9/v1", [("sk-unused-0000000000000000", None)],
                       pool=1)
    work = tasks(6000, prefix="c")
    runner = make_runner(gw, work)
    runner.started_wall = 1.0
    claim = take_lock(path, "c")
    await create_run(conn, "c", runner.records, work, name=None,
                     simulated=True, config={}, claim=claim)
    writer = StoreWriter(conn, path, "c", runner, claim=claim, max_rows=500)
    recorder = RunRecorder(writer, runner)
    writer.start()

    async def answered(records: list) -> None:
        for i, a in enumerate(records):
            a.attempts.append(Attempt(1, a.model, "sim", "fp", 1.0, 0.0, 10.0, outcome="ok"))
            a.state, a.response_text = SUCCEEDED, "x" * 2000
            recorder.on_event(ev.Event(ev.SUCCEEDED, 1.0, a, a.attempts[0]))
            if i % 700 == 0:
                await asyncio.sleep(0.001)  # let a flush start

    await answered(runner.records[:3000])
    # the loop is running (its first flush is done): on a slower machine its first step,
    # PostgreSQL's LISTEN connection, outlasted every row being added, and close() then
    # wrote them all in its own one flush
    deadline = time.monotonic() + 60
    while not writer.stats.flushes and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await answered(runner.records[3000:])
    # close() once the loop has taken the last batch: its commit is under way
    while writer.unsaved and time.monotonic() < deadline:
        await asyncio.sleep(0)
    await writer.close("finished")
    await gw.aclose()
    ok = "SELECT COUNT(*) FROM task_results WHERE state='succeeded'"
    assert raw_rows(path, ok)[0][0] == 6000
    assert raw_rows(path, "SELECT COUNT(*) FROM attempts")[0][0] == 6000
    events = raw_rows(path, "SELECT COUNT(*) FROM events")[0][0]  # backlog holds
    assert writer.stats.rows == 12000 + events and writer.stats.flushes > 1
    await conn.close()


async def test_last_names_the_newest_run_and_an_empty_store_says_so(sim_factory, db_target):
    path = db_target
    conn = await open_db(path)
    try:
        with pytest.raises(UserError, match="no stored runs yet"):
            await get_run(conn, "last", path)
        gw = make_client(sim_factory(profile="fixed:5"))
        for run_id in ("20261204-100000-aaaa", "20261204-100001-bbbb"):
            runner = make_runner(gw, tasks(3))
            await create_run(conn, run_id, runner.records, tasks(3), name=None, simulated=True,
                             config={}, claim=take_lock(path, run_id))
        await gw.aclose()
        # the newest by started_at, not by insertion or id: make the first one the newer
        await conn.execute("UPDATE runs SET started_at = started_at + 60 "
                           "WHERE id = '20261204-100000-aaaa'")
        assert (await get_run(conn, "last", path)).id == "20261204-100000-aaaa"
    finally:
        await conn.close()


async def test_a_big_run_is_created_without_a_wal_the_size_of_its_workload(tmp_path):
    """12,000 tasks of ~4 KB: as one transaction the WAL held all ~50 MB of them before the
    first call (a 100,000-task run: ~400 MB, past the 64 MiB `journal_size_limit`, which
    applies only after a checkpoint completes). Written in chunks, checkpointed between,
    it holds about one chunk (issue 34)."""
    from swarm_tui.gateway.client import GatewayClient
    from swarm_tui.store.runs import CREATE_CHUNK

    path = tmp_path / "runs.db"
    conn = await open_db(path)
    gw = GatewayClient("sim", "http://127.0.0.1:9/v1", [("sk-unused-0000000000000000", None)],
                       pool=1)
    body = "lorem ipsum dolor " * 230  # ~4 KB
    work = [t.model_copy(update={"prompt": f"{t.prompt} {body}"})
            for t in tasks(12_000, prefix="w")]
    runner = make_runner(gw, work)
    try:
        await create_run(conn, "w", runner.records, work, name=None, simulated=True,
                         config={}, claim=take_lock(path, "w"))
        wal = (tmp_path / "runs.db-wal").stat().st_size
        workload = sum(len(t.prompt) for t in work)
        assert wal < 0.6 * workload, (wal, workload)  # one chunk of 5,000, not 12,000
        assert len(work) > CREATE_CHUNK
        assert raw_rows(path, "SELECT COUNT(*) FROM tasks")[0][0] == 12_000
        hashed = raw_rows(path, "SELECT workload_hash FROM runs")[0][0]
        assert hashed  # written last: the run's creation finished
    finally:
        await conn.close()
        await gw.aclose()


@pytest.mark.slow
def test_processes_opening_an_old_database_together_migrate_it_once(tmp_path):
    """A run and the `runs` an on-call types beside it opened a database that needed a
    migration at the same moment: both read the old version, the second ran a step the
    first had just committed ("table key_changes already exists"), and failed. Each opener
    now migrates under one lock and reads the version again once it holds it."""
    path = tmp_path / "old.db"
    raw = sqlite3.connect(path)
    for v in range(5):
        raw.executescript(MIGRATIONS[v])
    raw.execute("PRAGMA user_version = 5")
    raw.commit()
    raw.close()
    path.chmod(0o600)
    env = {**os.environ, "SWARM_TUI_DB": str(path), "XDG_CONFIG_HOME": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-m", "swarm_tui", "runs", "--json"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL) for _ in range(6)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [err for _out, err in outs if err]
    assert all(json.loads(out) == [] for out, _err in outs)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    raw.close()
