"""A run split into leased batches and executed by worker processes (`run --workers N`,
`worker`), on SQLite and on PostgreSQL: each task answered exactly once, a dead worker's
batches leased again once expired, the run finished by the last worker out.

What was sent is counted where it was received: the simulator's /sim/stats, in its own
process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import httpx2
import psycopg
import pytest

from swarm_tui.core import events as ev
from swarm_tui.run.recorder import RunRecorder
from swarm_tui.run_sources import StoreSource
from swarm_tui.store import reads
from swarm_tui.store.claims import take_lock
from swarm_tui.store.db import open_db
from swarm_tui.store.fences import LeaseFence
from swarm_tui.store.leases import BATCH_TASKS, join_run, lease_batch, split_run
from swarm_tui.store.runs import create_run
from swarm_tui.store.target import PgTarget
from swarm_tui.store.writer import StoreWriter
from tests.conftest import (
    TEST_KEY,
    assert_one_line_error,
    free_port,
    make_client,
    make_runner,
    new_pg_database,
    raw_rows,
    swarm,
    tasks,
    until,
    wait_until,
)
from tests.functional.test_rate_limits import _llmock


def _served(port: int) -> int:
    """Requests the simulator answered, once it answers none any more: a call whose
    client was stopped is counted when its handler ends (after its latency), so a count
    read the moment the workers exit could miss the last few (185 stored, 182 served)."""
    deadline = time.monotonic() + 60
    while (stats := httpx2.get(f"http://127.0.0.1:{port}/sim/stats").json()).get("active", 0):
        assert time.monotonic() < deadline, "the simulator never finished its calls"
        time.sleep(0.05)
    return stats.get("served", 0)


def _workload(tmp_path, n: int):
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"id": f"t{i:05d}", "prompt": f"task {i}",
                                     "max_tokens": 16}) + "\n" for i in range(n)))
    return w


_STARTED: list[subprocess.Popen] = []  # this test's `run --workers`, each its own group


@pytest.fixture(autouse=True)
def _no_workers_left():
    """A test that fails or runs out of time leaves no starter or worker behind: a hung
    run's workers outlived their test and held CPU for the rest of the suite."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the starter and its workers
            proc.wait(10)


def _run(w, cfg, workers: int, lease_s: float = 10.0,
         extra: list[str] | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", str(w), "--config", str(cfg),
         "--concurrency", "60", "--workers", str(workers), "--headless", "--json", "--quiet",
         *(extra or [])],
        env={**os.environ, "GW_KEY": TEST_KEY, "SWARM_TUI_LEASE_S": str(lease_s)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        start_new_session=True)  # its workers share its group: one killpg ends them all
    _STARTED.append(proc)
    return proc


async def _stored_keys(db, run_id: str):
    conn = await open_db(db, create=False)
    try:
        return await reads.stored_keys(conn, run_id)
    finally:
        await conn.close()


def _count(db, sql: str, *args) -> int:
    """A count; 0 only while the database or the table does not exist yet (a poll before
    the run made it) — any other failure of the query fails the test."""
    try:
        return int(raw_rows(db, sql, args)[0][0] or 0)
    except (sqlite3.OperationalError, psycopg.errors.UndefinedTable) as e:
        if ("no such table" in str(e) or "unable to open database file" in str(e)
                or isinstance(e, psycopg.errors.UndefinedTable)):
            return 0
        raise


@pytest.mark.slow
def test_workers_split_a_run_and_answer_each_task_once(tmp_path, slow_sim, any_db):
    port, cfg = slow_sim
    n = 600
    proc = _run(_workload(tmp_path, n), cfg, 2)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 3), err  # 3: the SLA verdict of a slow machine's latency
    summary = json.loads(out)
    assert summary["status"] == "finished" and summary["succeeded"] == n
    assert _served(port) == n  # one request per task: nothing sent twice
    assert _count(any_db, "SELECT COUNT(*) FROM results WHERE state='succeeded'") == n
    assert _count(any_db, "SELECT COUNT(*) FROM batches WHERE done_at IS NULL") == 0
    # both workers took part, and each batch was leased once
    assert _count(any_db, "SELECT COUNT(DISTINCT worker) FROM batches") == 2
    assert _count(any_db, "SELECT MAX(leases) FROM batches") == 1
    assert _count(any_db, "SELECT COUNT(*) FROM workers WHERE ended_at IS NOT NULL") == 2
    # each worker stored its own row of the key; readers see one, with both workers' calls
    per_worker = raw_rows(any_db, "SELECT worker, calls FROM key_state")
    assert len(per_worker) == 2 and sum(c for _, c in per_worker) == n, per_worker
    keys = asyncio.run(_stored_keys(any_db, summary["run_id"]))
    assert [(k.calls, k.in_flight, k.state) for k in keys] == [(n, 0, "active")]


@pytest.mark.slow
def test_kill_9_of_one_of_three_workers_pays_at_most_its_leased_batches(tmp_path, slow_sim,
                                                                         any_db):
    port, cfg = slow_sim
    n = 1200
    proc = _run(_workload(tmp_path, n), cfg, 3, lease_s=2.0)  # its batches back in 2 s
    try:
        wait_until(lambda: _count(any_db, "SELECT COUNT(*) FROM workers") == 3
                   and _count(any_db, "SELECT COUNT(*) FROM results") >= 200,
                   "three busy workers", 90)
        victim, pid = raw_rows(any_db, "SELECT worker, pid FROM workers ORDER BY worker")[0]
        os.kill(pid, signal.SIGKILL)
        # what it held when it died: the most that may be sent twice
        held = _count(any_db, "SELECT SUM(last_seq - first_seq + 1) FROM batches WHERE "
                              "worker = ? AND done_at IS NULL", victim)
        out, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    # 3: the SLA's verdict, the machine's to give (the calls the victim lost count against
    # the call success rate, and how many it had out depends on the machine's speed: one
    # core gave 3 once) — what this test judges is below
    assert proc.returncode in (0, 3), err
    # the run is finished: no "`swarm-tui worker RUN` finishes the run" for a finished one
    assert "1 of 3 workers failed (exit -9); the others finished the run" in err, err
    summary = json.loads(out)
    assert summary["status"] == "finished" and summary["succeeded"] == n
    sla = summary["sla"]
    assert proc.returncode == (0 if sla["met"] or sla["inconclusive"] else 3), sla
    assert _count(any_db, "SELECT COUNT(*) FROM results WHERE state='succeeded'") == n
    assert _count(any_db, "SELECT MAX(c) FROM (SELECT COUNT(*) c FROM attempts WHERE "
                          "outcome='ok' GROUP BY seq) per_seq") == 1
    # its batches were leased again after their lease expired
    assert _count(any_db, "SELECT COUNT(*) FROM batches WHERE leases > 1") >= 1
    assert 0 < held <= 2 * BATCH_TASKS + 60
    extra = _served(port) - n
    assert 0 <= extra <= held, (extra, held)
    # what it had in flight at its last heartbeat is on record — sent, answer lost — and
    # the next holder's re-sends of those count as SENT MORE THAN ONCE; only the calls it
    # launched after that heartbeat are not (one flush window, in which each of its 20
    # slots may turn over: 21 measured once; bounded here by two windows' worth)
    lost = _count(any_db, "SELECT COUNT(*) FROM attempts WHERE outcome='lost'")
    stored = _count(any_db, "SELECT COUNT(*) FROM attempts")
    assert lost >= 1 and 0 <= _served(port) - stored <= 2 * 20, (_served(port), stored, lost)
    assert summary["sent_lost"] == lost and summary["sent_twice"] >= lost, summary



@pytest.mark.slow
def test_kill_9_of_the_starter_leaves_the_workers_to_finish_the_run(tmp_path, slow_sim,
                                                                   any_db):
    """The process that split the run and started the workers is killed with -9: the
    workers hold their own leases and finish the run (its last batch marks it finished);
    nothing is lost or paid twice, and no worker outlives the run."""
    port, cfg = slow_sim
    n = 900
    proc = _run(_workload(tmp_path, n), cfg, 2)
    try:
        pids = _two_busy_workers(any_db)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        wait_until(lambda: _count(any_db, "SELECT COUNT(*) FROM runs WHERE status = "
                                          "'finished'") == 1, "the workers' finished run",
                   150, seen=lambda: raw_rows(any_db, "SELECT status FROM runs"))
        wait_until(lambda: not any(_alive(p) for p in pids), "the workers' exit", 30)
    finally:
        for pid in [p for (p,) in raw_rows(any_db, "SELECT pid FROM workers")]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert _count(any_db, "SELECT COUNT(*) FROM results WHERE state='succeeded'") == n
    assert _count(any_db, "SELECT MAX(c) FROM (SELECT COUNT(*) c FROM attempts WHERE "
                          "outcome='ok' GROUP BY seq) per_seq") == 1
    assert _count(any_db, "SELECT COUNT(*) FROM attempts") == _served(port)


def _two_busy_workers(db) -> list[int]:
    """Wait until both workers of a split run have joined and 100 results are stored;
    their pids."""
    wait_until(lambda: _count(db, "SELECT COUNT(*) FROM workers") == 2
               and _count(db, "SELECT COUNT(*) FROM results") >= 100,
               "two busy workers", 90)
    return [pid for (pid,) in raw_rows(db, "SELECT pid FROM workers")]


def _alive(pid: int) -> bool:  # a zombie (exited, its parent gone) is not
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "group"), [(signal.SIGINT, False), (signal.SIGHUP, False),
                                            (signal.SIGHUP, True)],
                         ids=["INT", "HUP", "HUP-to-the-process-group"])
def test_a_signal_to_the_starter_reaches_its_workers(tmp_path, slow_sim, sig, group,
                                                      monkeypatch):
    """`run --workers 2` is one unit: a SIGINT (TERM, HUP) to the starter alone — not its
    process group — stops both workers cleanly and the starter exits 130 (129 for a
    hang-up, as every run does) once they have; what was paid for is stored and the rest
    resumes (the starter exited, and both workers ran on). A terminal that hangs up
    signals the whole process group: each worker then gets its own SIGHUP besides the
    starter's SIGTERM (SIGHUP's default action killed it mid-flight)."""
    port, cfg = slow_sim
    db = tmp_path / "runs.db"
    monkeypatch.setenv("SWARM_TUI_DB", str(db))
    # ~10 s of work: the signal must come while the run is live however late a loaded
    # machine sees the workers busy (900 tasks, ~3 s, ended first once in the full suite)
    n = 3000
    proc = _run(_workload(tmp_path, n), cfg, 2)
    try:
        pids = _two_busy_workers(db)
        (os.killpg if group else os.kill)(proc.pid, sig)
        _out, err = proc.communicate(timeout=90)
        assert proc.returncode == (129 if sig == signal.SIGHUP else 130), err
        assert "workers failed" not in err, err  # they stopped as they were told
        assert "readable by other users" not in err, err  # the run made its database
        assert not any(_alive(p) for p in pids), "a worker outlived its starter"
    finally:
        proc.kill()
        for pid in [p for (p,) in raw_rows(db, "SELECT pid FROM workers")]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    done = _count(db, "SELECT COUNT(*) FROM results WHERE state='succeeded'")
    assert 100 <= done < n
    # all on record: every call the gateway answered is a stored attempt, and a stored
    # attempt it did not answer is one the stop cancelled (its request cut on the wire or
    # never written: under load a cancel lands mid-send — 183 stored, 182 served)
    served = _served(port)
    outcomes = dict(raw_rows(db, "SELECT outcome, COUNT(*) FROM attempts GROUP BY outcome"))
    stored = sum(outcomes.values())
    assert outcomes.get("ok", 0) <= served <= stored, (served, outcomes)
    assert stored - served <= outcomes.get("cancelled", 0), (served, outcomes)
    r = swarm("resume", "last", "--config", str(cfg), "--headless", "--quiet", "--json",
              env={"GW_KEY": TEST_KEY, "SWARM_TUI_DB": str(db)}, timeout=120)
    assert json.loads(r.stdout)["succeeded"] == n, r.stderr


async def _split_and_join(conn, run_id: str, gw, work, claim, worker: str) -> None:
    """A stored run split in batches of 100, and `worker` joined to it."""
    await create_run(conn, run_id, make_runner(gw, work).records, work, name=None,
                     simulated=True, config={}, claim=claim)
    await split_run(conn, run_id, len(work), size=100)
    await join_run(conn, run_id, worker, claim.token, claim.host, claim.pid)


async def test_a_worker_whose_batch_was_leased_again_stops_writing(sim_factory, db_target):
    """The lease is the fence: once another worker holds the batch (this one was silent
    past its lease), this one's next flush writes nothing and it stops sending."""
    conn = await open_db(db_target)
    leases = await open_db(db_target, create=False, reconcile=False)
    gw = make_client(sim_factory(profile="fixed:30"))
    work = tasks(200, prefix="f")
    claim = take_lock(db_target, "f")
    try:
        await _split_and_join(conn, "f", gw, work, claim, "me")
        lease = await lease_batch(leases, "f", "me", claim.token, lease_s=60)
        assert lease is not None and (lease.first_seq, lease.last_seq) == (0, 99)
        fence = LeaseFence("f", "me", claim.token, lease_s=60)
        fence.add(lease.batch, lease.first_seq, lease.last_seq, time.monotonic())
        runner = make_runner(gw, work[:100], concurrency=10)  # batch 0's tasks, seqs 0..99
        writer = StoreWriter(conn, db_target, "f", runner, claim=claim, fence=fence,
                             flush_interval=0.05)
        RunRecorder(writer, runner)
        writer.start()
        takeover = threading.Thread(target=raw_rows, args=(
            db_target, "UPDATE batches SET token='theirs', worker='them' WHERE batch=0"))
        runner.consumers.append(lambda e: e.kind == ev.SUCCEEDED
                                and runner.counts["succeeded"] == 20 and takeover.start())
        await runner.run()
        takeover.join()
        await writer.close("finished")
    finally:
        claim.release()
        await gw.aclose()
        await leases.close()
        await conn.close()
    assert writer.failure == "lost_claim" and runner.stop_reason == "lost_claim"
    assert raw_rows(db_target, "SELECT token, done_at FROM batches WHERE batch=0") == [
        ("theirs", None)]
    assert _count(db_target, "SELECT COUNT(*) FROM results") < 100



async def test_a_holder_stuck_mid_statement_is_cut_off_and_its_batch_leased_again(
        sim_factory, pg_server):
    """A worker stopped in the middle of a pipelined write keeps its batch's row locked
    with no server timeout to end it (no Sync yet: its session is not idle in a
    transaction), so SKIP LOCKED skipped that batch for good (the one-core suite's hang).
    Once the lease has been out a whole lease more, the next worker that finds nothing to
    lease ends the holder's session (named by its heartbeat) and leases the batch."""
    target = new_pg_database(pg_server)
    conn = await open_db(target)
    gw = make_client(sim_factory(profile="fixed:30"))
    work = tasks(100, prefix="s")
    claim = take_lock(target, "s")
    holder = psycopg.connect(target.url, autocommit=True, application_name="swarm-tui")
    try:
        await _split_and_join(conn, "s", gw, work, claim, "stuck")
        leased_at = time.monotonic()
        lease = await lease_batch(conn, "s", "stuck", claim.token, lease_s=0.5)
        assert lease is not None
        # the stuck holder's session: the batch row locked, its pid in its heartbeat
        holder.execute("BEGIN")
        holder.execute("SELECT 1 FROM batches WHERE run_id = 's' FOR UPDATE")
        raw_rows(target, "UPDATE workers SET live_json = ? WHERE worker = 'stuck'",
                 (json.dumps({"db_pid": holder.info.backend_pid}),))
        while time.monotonic() - leased_at < 0.55:  # out of lease
            await asyncio.sleep(0.02)
        assert await lease_batch(conn, "s", "other", "t2", lease_s=0.5) is None
        if time.monotonic() - leased_at < 0.95:  # not yet a whole lease more: left alone
            # (a machine too slow to ask within that window skips this check)
            assert holder.execute("SELECT 1").fetchone() == (1,)
        while time.monotonic() - leased_at < 1.1:  # a whole lease more
            await asyncio.sleep(0.02)
        # the next asks cut the holder off (on a slow machine the first ask already may
        # have), then lease its batch once its locks went with its backend's exit
        async with asyncio.timeout(30):
            while (taken := await lease_batch(conn, "s", "other", "t2", lease_s=0.5)) is None:
                await asyncio.sleep(0.05)
        assert taken.batch == lease.batch
        with pytest.raises(psycopg.OperationalError):
            holder.execute("SELECT 1")
    finally:
        holder.close()
        claim.release()
        await gw.aclose()
        await conn.close()

@pytest.mark.slow
async def test_a_watcher_sees_every_worker_and_its_pause_and_cancel_reach_them_all(
        tmp_path, slow_sim, any_db):
    _port, cfg = slow_sim
    proc = _run(_workload(tmp_path, 6000), cfg, 2)  # 60 in flight at 200 ms: ~20 s of work
    src = None
    try:
        wait_until(lambda: _count(any_db, "SELECT COUNT(*) FROM workers") == 2
                   and _count(any_db, "SELECT COUNT(*) FROM results") >= 100,
                   "two busy workers", 90)
        run_id = raw_rows(any_db, "SELECT id FROM runs")[0][0]
        src = StoreSource(any_db, run_id, write=True)
        await src.open()
        snap = await src.snapshot()
        assert snap is not None and snap.in_flight > 0 and snap.concurrency == 60  # 30 + 30
        assert await src.control("pause")
        await until(lambda: _live_workers(any_db, "paused") == [True, True])
        assert await src.control("resume")
        await until(lambda: _live_workers(any_db, "paused") == [False, False])
        assert await src.control("cancel")
        out, err = await asyncio.to_thread(proc.communicate, timeout=120)
    finally:
        if src is not None:
            await src.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err  # cancelled, as `run` is
    assert json.loads(out)["status"] == "cancelled"
    assert _count(any_db, "SELECT COUNT(*) FROM workers WHERE ended_at IS NULL") == 0


def _live_workers(db, key: str) -> list:
    return [json.loads(r[0]).get(key) for r in raw_rows(
        db, "SELECT live_json FROM workers WHERE live_json IS NOT NULL ORDER BY worker")]


@pytest.mark.slow
def test_run_workers_refuses_one_metrics_port_for_many(tmp_path, slow_sim):
    _port, cfg = slow_sim
    db = tmp_path / "runs.db"
    r = swarm("run", str(_workload(tmp_path, 10)), "--config", str(cfg), "--workers", "2",
              "--metrics-port", "0", "--headless",
              env={"GW_KEY": TEST_KEY, "SWARM_TUI_DB": str(db)})
    assert_one_line_error(r, 2, "--metrics-port with --workers")
    assert "worker RUN_ID --metrics-port" in r.stderr
    assert not db.exists()  # refused before anything was stored


@pytest.mark.slow
def test_a_worker_rides_out_a_store_that_refuses_it_for_a_while(tmp_path, slow_sim,
                                                                pg_server):
    """Another session holds the batches table; the worker's statements time out
    (lock_timeout 200 ms, set in the URL as libpq allows) and its feed tries again instead
    of stopping the run for good (it did: a deadlock under the bench's load left the run
    'running' with no worker). Once the table is free the run finishes, each task once."""
    import psycopg

    db = new_pg_database(pg_server)
    url = db.url + "?options=-c%20lock_timeout%3D200"
    _port, cfg = slow_sim
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", str(_workload(tmp_path, 1500)),
         "--config", str(cfg), "--concurrency", "60", "--workers", "1", "--headless",
         "--json", "--quiet"],
        env={**os.environ, "GW_KEY": TEST_KEY, "SWARM_TUI_DB": url},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        wait_until(lambda: _count(db, "SELECT COUNT(*) FROM results") >= 100, "results", 90)
        waits: set = set()
        with psycopg.connect(db.url) as holder:
            holder.execute("LOCK TABLE batches IN ACCESS EXCLUSIVE MODE")

            def refused_again() -> bool:  # a statement of the worker waiting on the lock
                with psycopg.connect(db.url, autocommit=True) as c:
                    waits.update(c.execute(
                        "SELECT pid, query_start FROM pg_stat_activity WHERE "
                        "wait_event_type = 'Lock' AND application_name = 'swarm-tui'"
                    ).fetchall())
                return len(waits) >= 4  # several attempts, each timed out and tried again

            wait_until(refused_again, "the worker's statements waiting, again and again", 90)
        out, err = proc.communicate(timeout=120)  # the table free again (commit)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (0, 3), err
    summary = json.loads(out)
    assert (summary["status"], summary["succeeded"]) == ("finished", 1500)
    assert _count(db, "SELECT MAX(c) FROM (SELECT COUNT(*) c FROM attempts WHERE "
                      "outcome='ok' GROUP BY seq) per_seq") == 1
    assert _count(db, "SELECT COUNT(*) FROM events WHERE detail_json LIKE "
                      "'worker: the store refused the feed%'") >= 1


@pytest.mark.slow
def test_workers_share_a_third_party_servers_quota_llmock(tmp_path, monkeypatch):
    """llmock (a server we did not write): one key at 600/min, burst 600, x-ratelimit-* on
    every answer; two workers, 700 tasks. Counting the whole remainder each, they sent 65
    calls into 429s of 765 (measured, and the run breached its SLA); at their share, 0-9."""
    db = tmp_path / "runs.db"
    monkeypatch.setenv("SWARM_TUI_DB", str(db))
    port = free_port()
    server = _llmock(port, "--rpm", "600", "--latency-ms", "20", "--tool-mode", "off")
    try:
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[gateways.local]\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                       'key_env = ["GW_KEY"]\n')
        run = _run(_workload(tmp_path, 700), cfg, 2)
        out, err = run.communicate(timeout=120)
    finally:
        server.terminate()
        server.wait(10)
    assert run.returncode in (0, 3), err
    summary = json.loads(out)
    assert (summary["status"], summary["succeeded"]) == ("finished", 700)
    limited = _count(db, "SELECT COUNT(*) FROM attempts WHERE error_class='rate_limited'")
    # 5 %: an early version (each worker counting the whole remainder, no probe) sent 8.5 %
    # (65 of 765); now 0-9 of ~705 with two or four busy loops beside it, and once 26 of 726
    # (3.6 %) inside a full suite on two cores. (Ignoring the share alone now costs ~9: each
    # answer's headers carry what every worker spent, so the pacing corrects itself; the
    # share matters while a large remainder is spent at once.) When it fails: when the
    # 429s came, second by second
    per_second = raw_rows(db, "SELECT CAST(a.sent_at - r.started_at AS INTEGER), COUNT(*) "
                              "FROM attempts a JOIN runs r ON r.id = a.run_id "
                              "WHERE a.error_class = 'rate_limited' GROUP BY 1 ORDER BY 1")
    assert limited <= 0.05 * summary["calls"], (limited, summary["calls"], per_second)


def _sessions(db) -> list:
    """What each server session of the run does (PostgreSQL): who holds what, who waits."""
    if not isinstance(db, PgTarget):
        return []
    return raw_rows(db, "SELECT pid, application_name, state, wait_event_type, "
                        "left(query, 60), now() - state_change FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()")


def _first_of_two_busy_workers(db) -> int:
    """The pid of the first of a run's two workers, once both have joined and stored some."""
    wait_until(lambda: _count(db, "SELECT COUNT(*) FROM workers") == 2
               and _count(db, "SELECT COUNT(*) FROM results") >= 150, "two busy workers", 90)
    return raw_rows(db, "SELECT pid FROM workers ORDER BY worker")[0][0]


def _write_lock_free(db, wait_s: float) -> bool:
    """Whether a writer gets SQLite's one write lock within `wait_s` (then let go)."""
    c = sqlite3.connect(db, timeout=wait_s, isolation_level=None)
    try:
        c.execute("BEGIN IMMEDIATE")
        c.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError as e:
        assert "locked" in str(e), e
        return False
    finally:
        c.close()


def _sigstop(pid: int, db, *, in_a_write: bool) -> None:
    """SIGSTOP a worker outside or inside a write of its own. On SQLite a process stopped
    inside a write holds the one write lock until it continues: every other writer waits
    (the stop landed there by chance in about one run of twenty, and the test that meant
    the other case failed). A lock not free within 3 s is the stopped one's: the live
    worker's transactions last milliseconds. PostgreSQL locks rows, and cuts off a
    stopped holder itself (store/leases.py): any moment does."""
    if isinstance(db, PgTarget):
        os.kill(pid, signal.SIGSTOP)
        return
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        os.kill(pid, signal.SIGSTOP)
        if in_a_write:
            if not _write_lock_free(db, 0) and not _write_lock_free(db, 3):
                return
        elif _write_lock_free(db, 3):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)
    pytest.fail(f"no moment {'inside' if in_a_write else 'outside'} a write to stop pid {pid}")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_worker_stopped_past_its_lease_sends_nothing_more_and_its_calls_stay_on_record(
        tmp_path, slow_sim, any_db):
    """SIGSTOP one of two workers longer than its lease, then SIGCONT: the other leases its
    batches again; the stopped one sends nothing once its lease has run out on its own
    clock, and writes what it had sent and was answered (unfenced: attempts by uid, a
    result only where none is). Every request the gateway saw is a stored attempt, and
    every task sent twice shows as sent twice (it used to vanish with a journal another
    worker removed)."""
    port, cfg = slow_sim
    n = 1500
    # a lease long enough for a starved worker's flushes to renew it (on one core, with
    # 3 s, the other worker could not renew its own in time, held its sends and never
    # came to lease the stopped one's batches)
    proc = _run(_workload(tmp_path, n), cfg, 2, lease_s=6.0)
    try:
        pid = _first_of_two_busy_workers(any_db)
        _sigstop(pid, any_db, in_a_write=False)
        try:
            # past its lease: the other worker has leased one of its batches again
            wait_until(lambda: _count(any_db, "SELECT COUNT(*) FROM batches WHERE leases > 1")
                       >= 1, "a batch leased again", 150, seen=lambda: (
                           time.time(), raw_rows(any_db, "SELECT batch, worker, leases, "
                                                 "expires_at, done_at FROM batches"),
                           raw_rows(any_db, "SELECT worker, heartbeat_at, ended_at FROM "
                                            "workers"),
                           _sessions(any_db),
                           raw_rows(any_db, "SELECT actor, detail_json FROM events WHERE "
                                            "kind = 'control'")[-8:]))
        finally:
            os.kill(pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (0, 3), err
    assert "Traceback" not in err, err
    summary = json.loads(out)
    assert summary["succeeded"] == n
    served = _served(port)
    attempts = _count(any_db, "SELECT COUNT(*) FROM attempts")
    assert attempts == served, (attempts, served)  # nothing sent is off the record
    repeats = _count(any_db, "SELECT COUNT(*) FROM (SELECT seq FROM attempts GROUP BY seq "
                             "HAVING COUNT(*) > 1) twice")
    assert served - n == _count(any_db, "SELECT COUNT(*) - COUNT(DISTINCT seq) FROM attempts")
    assert summary["sent_twice"] == repeats, (summary["sent_twice"], repeats)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_worker_stopped_inside_a_write_is_named_by_the_other_and_nothing_is_lost(
        tmp_path, slow_sim, no_user_config, monkeypatch):
    """SQLite has one write lock: a worker stopped holding it (SIGSTOP, Ctrl-Z, a debugger)
    holds every other writer until it continues. The other worker used to wait without a
    word; it now says which process holds the store and that it is stopped, holds its own
    sends (each answer is stored before more calls go out), and says when it may write
    again. Continued, the run finishes: every request the gateway saw is on record."""
    port, cfg = slow_sim
    db = tmp_path / "runs.db"
    monkeypatch.setenv("SWARM_TUI_DB", str(db))
    n = 2400  # (at 60 in flight of 200 ms: long enough to catch a worker inside a write)
    proc = _run(_workload(tmp_path, n), cfg, 2, lease_s=6.0)
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        pid = _first_of_two_busy_workers(db)
        _sigstop(pid, db, in_a_write=True)
        try:
            wait_until(lambda: any("which is stopped" in line for line in said),
                       "the other worker naming the stopped one", 90, seen=lambda: said)
        finally:
            os.kill(pid, signal.SIGCONT)
        out = proc.stdout.read()
        proc.wait(150)
        reader.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (0, 3), said
    other = raw_rows(db, "SELECT worker FROM workers WHERE pid <> ?", (pid,))[0][0]
    held = [line.rstrip("\n") for line in said if "store:" in line]
    assert held[0].startswith(
        f"swarm-tui: worker {other}: store: cannot write (database {db}: locked by another "
        f"process: pid {pid} (swarm-tui), which is stopped; nothing can be written until it "
        f"continues (kill -CONT {pid})); dispatch paused with "), held
    assert f"swarm-tui: worker {other}: store: writable again; dispatch resumed" in held, held
    # the feed's own refusals name the holder too (there is one when a lease of its came
    # due during the stop: about one run in two here)
    refusals = [r[0] for r in raw_rows(db, "SELECT detail_json FROM events WHERE detail_json "
                                           "LIKE '%the store refused the feed%'")]
    assert all(f"pid {pid} (swarm-tui), which is stopped" in r for r in refusals), refusals
    summary = json.loads(out)
    assert summary["succeeded"] == n
    served = _served(port)
    assert _count(db, "SELECT COUNT(*) FROM attempts") == served  # nothing sent is unrecorded
    assert served - n == _count(db, "SELECT COUNT(*) - COUNT(DISTINCT seq) FROM attempts")
