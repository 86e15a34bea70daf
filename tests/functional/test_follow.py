"""A stored run followed incrementally (watch, replay): each tick reads only the rows stored
since the last one, the figures end where the stored summary does, and a finished replay
reads nothing at all."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from swarm_tui.run_sources import StoreSource
from swarm_tui.run_sources import stored as stored_source
from swarm_tui.store.target import PgTarget
from tests.conftest import raw_rows, swarm, until


def _start_run(n: int, *extra: str) -> subprocess.Popen:
    # 503s: retries and a few failed tasks, so calls, the log and the error classes move too
    return subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", "--demo", str(n), "--headless", "--quiet",
         "--concurrency", "30", "--sim-profile", "fixed:40", "--sim-rate-429", "0",
         "--sim-rate-503", "0.08", *extra], env=os.environ.copy(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)


def _running(db: Path | PgTarget) -> bool:
    try:
        return bool(raw_rows(db, "SELECT COUNT(*) FROM runs r JOIN results x ON "
                                 "x.run_id = r.id WHERE r.status='running'")[0][0])
    except (sqlite3.Error, psycopg.Error):
        return False  # not created yet


@pytest.mark.slow
async def test_a_watched_run_is_read_incrementally_and_ends_at_the_stored_figures(monkeypatch,
                                                                                   any_db):
    # a tick reads at most TICK_ROWS rows while the run executes: small here, so the
    # watcher falls behind and catches up, and still ends at the stored figures
    monkeypatch.setattr(stored_source, "TICK_ROWS", 20)
    db = any_db
    proc = _start_run(1500)
    sources: list[StoreSource] = []
    try:
        await _follow_to_the_end(db, proc, sources)
    finally:
        for src in sources:  # an unclosed connection's thread keeps pytest from exiting
            await src.close()
        if proc.poll() is None:
            proc.kill()


async def _follow_to_the_end(db: Path | PgTarget, proc: subprocess.Popen, sources: list) -> None:
    try:
        await until(lambda: _running(db))
        src = StoreSource(db, None)
        await src.open()
        sources.append(src)
        statements: list[str] = []
        assert src.conn is not None
        await src.conn.set_trace_callback(statements.append)
        snaps = []
        while True:  # tick until the executor has finished and the reader has seen it
            snap = await src.snapshot()
            snaps.append(snap)
            if snap is not None and snap.status != "running":
                break
            await asyncio.sleep(0.1)
        assert proc.wait(60) in (0, 3), proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    done = [s.done for s in snaps if s is not None]
    assert len(done) >= 3 and done == sorted(done) and done[0] < 1500  # followed, not jumped
    # after the first read, results come by rowid range: only the rows stored since
    reads = [s for s in statements if "FROM results" in s]
    assert reads[0].startswith("SELECT") and "rowid >" not in reads[0]
    assert len(reads) >= 3 and all("rowid > " in s for s in reads[1:])
    assert not any("task_results" in s for s in statements)  # never the whole run again
    assert any(s.endswith("LIMIT 20") for s in reads)  # bounded ticks while it ran

    stored = json.loads(swarm("report", src.run_id, "--json").stdout)
    last = snaps[-1]
    assert last.status == stored["status"] == "finished"
    assert (last.counts["succeeded"], last.counts["failed"]) == (stored["succeeded"],
                                                                 stored["failed"])
    assert last.counts["queued"] == 0 and last.done == 1500
    assert last.calls == stored["calls"] and stored["calls"] > 1500  # retries counted
    assert last.call_success_rate == pytest.approx(stored["call_success_rate"])
    assert last.success_rate == pytest.approx(stored["success_rate"])
    assert last.cost_usd == pytest.approx(stored["cost_usd"])
    assert (last.tokens_in, last.tokens_out) == (stored["tokens"]["input"],
                                                 stored["tokens"]["output"])
    for got, want in zip(last.latency_ms, (stored["latency_ms"][p] for p in
                                           ("p50", "p95", "p99")), strict=True):
        assert got == pytest.approx(want, rel=0.02, abs=1)  # a 2-digit sketch vs exact ranks
    assert sum(last.histogram) == stored["succeeded"]
    assert any(line.split()[1] == "RETRY" for line in last.log)

    # a replay of the finished run: read once, then nothing per tick
    replay = StoreSource(db, src.run_id, replay=True)
    await replay.open()
    sources.append(replay)
    assert replay.conn is not None
    first = await replay.snapshot()
    assert first is not None and first.counts == last.counts and first.calls == last.calls
    statements.clear()
    await replay.conn.set_trace_callback(statements.append)
    for _ in range(3):
        assert await replay.snapshot() is first
    assert statements == []


@pytest.mark.slow
@pytest.mark.usefixtures("no_user_config")
async def test_a_watcher_follows_a_resume_of_a_cancelled_run():
    """A resume re-sends the cancelled tasks; a reader that watched the cancelled session
    follows the new one from scratch and ends with every task succeeded."""
    db = Path(os.environ["SWARM_TUI_DB"])
    proc = _start_run(600, "--rate", "60")  # ~10 s: the cancel lands mid-run, fast or slow
    await until(lambda: _running(db))
    run_id = raw_rows(db, "SELECT id FROM runs")[0][0]
    src = StoreSource(db, run_id, write=True)  # as `watch --write` then `x` would
    await src.open()
    try:  # (an unclosed aiosqlite connection's thread would keep pytest from exiting)
        await src.snapshot()
        assert await src.control("cancel")
        proc.wait(60)
        cancelled = await src.snapshot()
        assert cancelled is not None and cancelled.status == "cancelled"
        assert cancelled.counts["cancelled"] > 0
        r = swarm("resume", run_id, "--json", "--quiet")
        assert r.returncode in (0, 3), r.stderr
        after = await src.snapshot()
        assert after is not None and after.status == "finished"
        assert after.counts["cancelled"] == 0 and after.done == 600
        assert after.counts["succeeded"] == json.loads(r.stdout)["succeeded"]
    finally:
        await src.close()
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
async def test_a_watcher_shows_time_on_call_on_the_executors_clock(no_user_config):
    """A resumed run's calls, watched: each call's send as the watcher places it agrees
    with the executor's own record of that send — never the seconds between the run's
    first start and this executor's (a watcher read the executor's run-relative times
    against its own run clock: 6-16 s on call for calls of 3 s). Relations between the two
    records, not a bound on how long a call takes on this machine."""
    db = Path(os.environ["SWARM_TUI_DB"])
    first = _start_run(400, "--concurrency", "20", "--sim-profile", "fixed:3000",
                       "--sim-rate-503", "0")
    try:
        await until(lambda: _running(db))
        run_id = raw_rows(db, "SELECT id FROM runs")[0][0]
        started = raw_rows(db, "SELECT started_at FROM runs")[0][0]
        first.kill()
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    # the resume starts its clock well after the run's own start
    await until(lambda: time.time() - started > 8, timeout=30)
    resumed = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "resume", run_id, "--quiet", "--headless"],
        env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL)
    src = StoreSource(db, run_id)
    try:
        # the resume holds the run (its pid in the row), not the killed first executor
        await until(lambda: resumed.poll() is None and raw_rows(
            db, "SELECT pid FROM runs")[0][0] == resumed.pid, timeout=90)
        await src.open()
        shown: dict[int, float] = {}  # seq -> its send, as the watcher places it (unix s)
        while len(shown) < 10:
            snap = await src.snapshot()
            if snap is not None:
                for s in snap.slots:
                    if s.cell is not None and s.started_s is not None:
                        shown.setdefault(s.cell.seq, started + s.started_s)
            await asyncio.sleep(0.2)
        # the executor's record of each of those sends, once it is stored
        def recorded() -> dict[int, tuple[float, float]]:
            rows = raw_rows(db, "SELECT seq, sent_at, queue_ms FROM attempts WHERE sent_at > ? "
                                "AND outcome = 'ok'", (started + 8,))
            return {seq: (sent, queue) for seq, sent, queue in rows if seq in shown}
        await until(lambda: len(recorded()) == len(shown), timeout=120)
        for seq, (sent_at, queue_ms) in recorded().items():
            # between the call's launch (its queue time before the wire, at most) and the
            # send the executor stored (the client's own delay moves it later)
            assert sent_at - queue_ms / 1000 - 0.01 <= shown[seq] <= sent_at + 0.01, (
                seq, shown[seq] - sent_at, queue_ms)
    finally:
        await src.close()
        resumed.kill()
        resumed.wait(10)
