"""Never lose a paid result, never pay twice: ownership, unwritable stores, crashes, journals.

Counts are taken on the simulator's own /sim/stats in a separate process, so what was
*sent* is measured where it was received, not inferred from our own rows.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx2
import psycopg
import pytest

from swarm_tui.core import events as ev
from swarm_tui.run.recorder import RunRecorder
from swarm_tui.store.claims import take_lock
from swarm_tui.store.db import open_db
from swarm_tui.store.runs import create_run, resumable_tasks
from swarm_tui.store.spill import find_journals, read_journal
from swarm_tui.store.target import PgTarget
from swarm_tui.store.task_bodies import StoredBodies
from swarm_tui.store.writer import STORE_HOLD, STORE_STOPPED, StoreWriter
from tests.conftest import (
    TEST_KEY,
    assert_one_line_error,
    make_client,
    make_runner,
    raw_rows,
    start_sim_process,
    swarm,
    tasks,
    wait_until,
)

CONCURRENCY = 20


def _requests(port: int) -> int:
    return httpx2.get(f"http://127.0.0.1:{port}/sim/stats").json().get("requests", 0)


def _q(db: Path | PgTarget, sql: str, *args):
    if isinstance(db, PgTarget):
        try:
            return raw_rows(db, sql, args)
        except psycopg.errors.UndefinedTable as e:  # as sqlite's "no such table"
            raise sqlite3.OperationalError(str(e)) from None
    # mode=rw: a poll before the run made its database must not create it (0644) first
    raw = sqlite3.connect(f"file:{db}?mode=rw", uri=True, timeout=10)
    try:
        with raw:
            return raw.execute(sql, args).fetchall()
    finally:
        raw.close()


def _results(db: Path | PgTarget) -> int:
    try:
        return _q(db, "SELECT COUNT(*) FROM results")[0][0]
    except sqlite3.OperationalError:
        return 0  # not created yet


def _workload(tmp_path: Path, n: int, max_tokens: int = 16) -> Path:
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"id": f"t{i:05d}", "prompt": f"task {i}",
                                     "max_tokens": max_tokens}) + "\n" for i in range(n)))
    return w


def _popen(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "swarm_tui", *args],
                            env={**os.environ, "GW_KEY": TEST_KEY}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def _run_args(w: Path, cfg: Path) -> list[str]:
    return ["run", str(w), "--config", str(cfg), "--concurrency", str(CONCURRENCY),
            "--headless", "--quiet"]


def _only_run(db: Path | PgTarget) -> str:
    wait_until(lambda: _results(db) > 0 or bool(_q(db, "SELECT id FROM runs")), "the run row")
    return _q(db, "SELECT id FROM runs")[0][0]


# -- the store becomes unwritable mid-run ------------------------------------------------------
class _Log:
    def __init__(self) -> None:
        self.items: list[tuple[str, float, str | None]] = []

    def __call__(self, e: ev.Event) -> None:
        self.items.append((e.kind, e.at_ms, e.detail))


@pytest.mark.slow
async def test_full_store_holds_dispatch_journals_and_resume_sends_only_unanswered(
        sim_factory, tmp_path):
    server = sim_factory(profile="fixed:30")
    path = tmp_path / "runs.db"
    conn = await open_db(path)
    gw = make_client(server)
    work = tasks(3000, max_tokens=200, prefix="f")
    runner = make_runner(gw, work, concurrency=50)
    log = _Log()
    runner.consumers.append(log)
    claim = take_lock(path, "full")
    await create_run(conn, "full", runner.records, work, name=None,
                     simulated=True, config={}, claim=claim)
    async with conn.execute("PRAGMA page_count") as cur:
        pages = (await cur.fetchone())[0]
    # the database may grow by ~40 pages: a few hundred results, then "database or disk is full"
    await conn.execute(f"PRAGMA max_page_count = {pages + 40}")
    writer = StoreWriter(conn, path, "full", runner, claim=claim, flush_interval=0.05,
                         grace_s=0.5)
    RunRecorder(writer, runner)
    writer.start()
    await runner.run()
    await writer.close("finished")
    await gw.aclose()
    await conn.close()

    assert writer.failure == STORE_STOPPED and runner.stop_reason == STORE_STOPPED
    assert "full" in writer.failure_line() and str(writer.journal.path) in writer.failure_line()
    held_at = next(at for kind, at, d in log.items if kind == ev.CONTROL and d
                   and d.startswith("store: cannot write"))
    sent_after = [at for kind, at, _ in log.items if kind == ev.STARTED and at > held_at]
    assert sent_after == []  # nothing new went out once a flush had failed
    assert STORE_HOLD in runner.holds

    # every call the simulator served is stored or journaled (no paid answer lost)
    stored = _q(path, "SELECT COUNT(*) FROM attempts")[0][0]
    journal = read_journal(writer.journal.path)
    journaled = [r for t, r in journal if t == "attempt"]
    answered_in_journal = {r[1] for t, r in journal if t == "result" and r[2] == "succeeded"}
    served = server.app.stats["requests"]
    assert 0 < stored < served and served == stored + len(journaled)
    assert answered_in_journal

    # space is back: opening the database imports the journal before anything is sent
    conn = await open_db(path)
    assert find_journals(path) == {}
    seqs, todo, prior = await resumable_tasks(conn, "full")
    answered = {s for (s,) in _q(path, "SELECT seq FROM results WHERE state='succeeded'")}
    assert answered_in_journal <= answered and not set(seqs) & answered
    assert len(seqs) == 3000 - len(answered)
    before = server.app.stats["requests"]
    gw = make_client(server)
    bodies = StoredBodies(path, "full")  # heads only: the prompts are read at each send
    runner = make_runner(gw, todo, concurrency=50, bodies=bodies)
    for a, s, p in zip(runner.records, seqs, prior, strict=True):
        a.seq, a.prior_attempts = s, p
    claim = take_lock(path, "full")
    await conn.execute("UPDATE runs SET owner_token=? WHERE id='full'", (claim.token,))
    writer = StoreWriter(conn, path, "full", runner, claim=claim)
    RunRecorder(writer, runner)
    writer.start()
    await runner.run()
    await writer.close("finished")
    await bodies.aclose()
    await gw.aclose()
    await conn.close()
    assert server.app.stats["requests"] - before == len(seqs)  # only never-answered tasks
    assert _q(path, "SELECT state, COUNT(*) FROM results GROUP BY state") == [("succeeded", 3000)]
    assert _q(path, "SELECT status FROM runs") == [("finished",)]


async def test_a_journal_an_older_version_wrote_is_imported(sim_factory, tmp_path):
    """A journal outlives an upgrade (a full disk, then a new swarm-tui to resume with):
    its attempt rows have the columns of their day — before schema 17, no retry_detail —
    and are imported as they are, not refused for their width."""
    from swarm_tui.store.reconcile import reconcile_runs
    from swarm_tui.store.spill import SpillJournal

    path = tmp_path / "runs.db"
    conn = await open_db(path)
    work = tasks(2, prefix="o")
    runner = make_runner(make_client(sim_factory(profile="fixed:30")), work)
    claim = take_lock(path, "old")
    await create_run(conn, "old", runner.records, work, name=None, simulated=True, config={},
                     claim=claim)
    claim.release()
    journal = SpillJournal(path, "old")
    journal.reserve()
    older = ("tok:1", "old", 0, 1, "deepseek-v3.2", "sim", "sk-…abcd#123456", time.time(),
             1.0, 120.0, 40.0, 503, "server", "busy", 0.5, 0, 0, 0, "error")
    assert len(older) == 19 and journal.append([("attempt", older)])
    try:
        assert await reconcile_runs(conn, path) == []
        async with conn.execute("SELECT uid, error_class, retry_wait_s, retry_detail "
                                "FROM attempts WHERE run_id='old'") as cur:
            assert [tuple(r) for r in await cur.fetchall()] == [("tok:1", "server", 0.5, None)]
    finally:
        await conn.close()
    assert find_journals(path) == {}  # imported, then removed


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       capture_output=True)
    return r.returncode == 0


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_disk_full_mid_run_exits_2_and_resume_sends_only_unanswered(tmp_path, sim_proc,
                                                                   monkeypatch):
    """The real thing: a small filesystem fills up under a headless run."""
    fs = tmp_path / "small"
    if not _mount_tmpfs(fs, "64m"):
        pytest.skip("needs root to mount a small tmpfs")
    # past its reservation the journal moves to the temp folder: this test's own, not the
    # machine's /tmp (whose fallback folder every later open of a database would look in)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    env = {"GW_KEY": TEST_KEY, "TMPDIR": str(tmp)}
    try:
        port, cfg = sim_proc
        cfg.write_text(cfg.read_text() + "[store]\nunwritable_grace_s = 1\n")
        ballast = fs / "ballast"
        ballast.write_bytes(b"\0" * (61 << 20))  # ~3 MiB left: some hundred results
        db = fs / "runs.db"
        w = _workload(tmp_path, 4000, max_tokens=150)
        r = swarm(*_run_args(w, cfg), "--db", str(db), env=env, timeout=120)
        assert_one_line_error(r, 2, "disk full", "journaled to", "swarm-tui resume")
        run_id = _q(db, "SELECT id FROM runs")[0][0]
        journals = find_journals(db)[run_id]
        entries = [e for j in journals for e in read_journal(j)]
        stored = _q(db, "SELECT COUNT(*) FROM attempts")[0][0]
        served = _requests(port)
        assert served == stored + sum(1 for t, _ in entries if t == "attempt")
        assert served < 4000  # it stopped sending, it did not run the whole workload

        ballast.unlink()  # space is freed
        resumed = swarm("resume", run_id, "--db", str(db), "--config", str(cfg), "--quiet",
                        env=env, timeout=120)
        assert resumed.returncode in (0, 3), resumed.stderr
        assert _requests(port) == 4000  # every task answered exactly once, in total
        assert _q(db, "SELECT COUNT(*) FROM results WHERE state='succeeded'") == [(4000,)]
        assert find_journals(db) == {}
    finally:
        subprocess.run(["umount", "-l", str(fs)], check=False)


# -- one executor per run ---------------------------------------------------------------------
@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_a_hang_up_ends_a_headless_run_cleanly_with_every_answer_stored(tmp_path, sim_proc):
    """An SSH drop under `run --headless` started without tmux: SIGHUP. Its default action
    killed the process mid-flight — answered calls not yet flushed were paid and lost. Now
    it ends as the console's hang-up does: the swarm is cancelled, what was answered is
    stored, 129, resumable; every call the gateway saw is on record (the ones cancelled in
    flight are sent again by the resume, as after a Ctrl-C)."""
    port, cfg = sim_proc
    db = tmp_path / "runs.db"
    n = 4000
    proc = subprocess.Popen([sys.executable, "-m", "swarm_tui", *_run_args(_workload(tmp_path, n),
                                                                         cfg), "--db", str(db)],
                            env={**os.environ, "GW_KEY": TEST_KEY}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        wait_until(lambda: _results(db) >= 300 or proc.poll() is not None, "some results")
        assert proc.poll() is None, "the run ended before the hang-up"
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 129, (proc.returncode, err)
    assert "Traceback" not in err, err
    run_id, status = _q(db, "SELECT id, status FROM runs")[0]
    assert status == "cancelled", status
    # every call the gateway answered is a stored attempt; a stored attempt it did not
    # answer is one the hang-up cancelled (cut on the wire, or never written: under load a
    # cancel lands mid-send — 361 stored, 350 served, 11 of them cancelled)
    served = _requests(port)
    outcomes = dict(_q(db, "SELECT outcome, COUNT(*) FROM attempts GROUP BY outcome"))
    stored = sum(outcomes.values())
    assert outcomes.get("ok", 0) <= served <= stored < n, (served, outcomes)
    assert stored - served <= outcomes.get("cancelled", 0), (served, outcomes)
    resumed = swarm("resume", run_id, "--db", str(db), "--config", str(cfg), "--quiet",
                    env={"GW_KEY": TEST_KEY}, timeout=120)
    assert resumed.returncode in (0, 3), resumed.stderr
    # in total: each task answered once; the only repeat sends are the calls the hang-up
    # cancelled in flight, each on record
    served = _requests(port)
    cancelled = _q(db, "SELECT COUNT(*) FROM attempts WHERE outcome='cancelled'")[0][0]
    assert n <= served <= n + cancelled, (served, cancelled)
    assert served <= _q(db, "SELECT COUNT(*) FROM attempts")[0][0]
    assert _q(db, "SELECT COUNT(*) FROM results WHERE state='succeeded'") == [(n,)]
    assert _q(db, "SELECT MAX(c) FROM (SELECT COUNT(*) c FROM attempts WHERE outcome='ok' "
                  "GROUP BY seq) per_seq") == [(1,)]


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_a_stopped_executor_keeps_its_run(tmp_path, sim_proc):
    port, cfg = sim_proc
    db = Path(os.environ["SWARM_TUI_DB"])
    proc = _popen(*_run_args(_workload(tmp_path, 1500), cfg))
    try:
        wait_until(lambda: _results(db) >= 100, "some stored results")
        run_id = _only_run(db)
        proc.send_signal(signal.SIGSTOP)
        # long past the old 5 s heartbeat window (the heartbeat is not ownership)
        wait_until(lambda: time.time() - _q(db, "SELECT heartbeat_at FROM runs")[0][0] > 6,
                   "a stale heartbeat", timeout=30)
        assert_one_line_error(swarm("resume", run_id), 2, "still being executed")
        listed = json.loads(swarm("runs", "--json").stdout)
        assert listed[0]["status"] == "running"
    finally:
        proc.send_signal(signal.SIGCONT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 3), err
    assert _requests(port) == 1500  # exactly one request per task
    assert _q(db, "SELECT COUNT(*) FROM attempts") == [(1500,)]


def _interrupted_run(tmp_path: Path, cfg: Path, db: Path | PgTarget, n: int, stored: int) -> str:
    proc = _popen(*_run_args(_workload(tmp_path, n), cfg))
    wait_until(lambda: _results(db) >= stored, f"{stored} stored results")
    proc.kill()
    proc.wait(10)
    return _only_run(db)


def _unanswered(db: Path | PgTarget, run_id: str) -> int:
    return _q(db, "SELECT COUNT(*) FROM tasks t LEFT JOIN results r ON r.run_id = t.run_id "
                  "AND r.seq = t.seq WHERE t.run_id = ? AND (r.state IS NULL OR "
                  "r.state = 'cancelled')", run_id)[0][0]


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_two_resumes_at_once_exactly_one_runs(tmp_path, sim_proc):
    port, cfg = sim_proc
    db = Path(os.environ["SWARM_TUI_DB"])  # the lock is a file on both back ends
    run_id = _interrupted_run(tmp_path, cfg, db, 2500, 200)
    todo = _unanswered(db, run_id)
    before = _requests(port)
    a, b = (_popen("resume", run_id, "--config", str(cfg), "--quiet") for _ in range(2))
    outs = [p.communicate(timeout=120) for p in (a, b)]
    codes = sorted(p.returncode for p in (a, b))
    ran = [err for _out, err in outs if "resuming run" in err]
    assert len(ran) == 1, outs
    refused = [err for _out, err in outs if "resuming run" not in err]
    assert ("being executed" in refused[0] or "executing it" in refused[0]
            or "nothing to resume" in refused[0]), refused
    assert codes[-1] in (0, 2, 3)
    assert _requests(port) - before == todo  # the unanswered tasks, each sent once
    assert _q(db, "SELECT COUNT(*) FROM results WHERE state='succeeded'") == [(2500,)]


@pytest.mark.slow
def test_kill_9_at_random_points_then_resume_pays_each_task_once_but_the_window(
        tmp_path, sim_proc, any_db):
    port, cfg = sim_proc
    db = any_db
    n, kills = 3000, 5
    rng = random.Random(11)
    proc = _popen(*_run_args(_workload(tmp_path, n), cfg))
    run_id = None
    for i in range(kills):
        start = _results(db)
        target = start + rng.randint(1, 300)
        wait_until(lambda t=target, p=proc: _results(db) >= t or p.poll() is not None, "progress")
        proc.kill()
        proc.wait(10)
        run_id = run_id or _only_run(db)
        if i < kills - 1:
            proc = _popen("resume", run_id, "--config", str(cfg), "--quiet")
    final = swarm("resume", run_id, "--config", str(cfg), "--quiet", env={"GW_KEY": TEST_KEY},
                  timeout=120)
    assert final.returncode in (0, 3), final.stderr
    per_task = _q(db, "SELECT COUNT(*) FROM results WHERE run_id=? AND state='succeeded'",
                  run_id)
    assert per_task == [(n,)]
    assert _q(db, "SELECT MAX(c) FROM (SELECT COUNT(*) c FROM attempts WHERE outcome='ok' "
                  "GROUP BY seq) per_seq") == [(1,)]
    # a kill loses at most the calls in flight plus one flush window of results
    # (fixed:50 at 20 in flight ≈ 400 answers/s, 0.25 s window ≈ 100)
    window = CONCURRENCY + 100
    sent = _requests(port)
    extra = sent - n
    assert 0 <= extra <= kills * window, extra
    # what each killed executor had in flight at its last heartbeat is on record as sent
    # with its answer lost, and a task sent again after it counts as sent twice; only
    # calls launched after the last commit before a kill are off the record
    lost = _q(db, "SELECT COUNT(*) FROM attempts WHERE outcome = 'lost'")[0][0]
    assert lost >= kills - 1, lost  # ~20 calls are always in flight
    unrecorded = sent - _q(db, "SELECT COUNT(*) FROM attempts")[0][0]
    assert unrecorded <= kills * 100, (unrecorded, lost, extra)
    report = json.loads(swarm("report", run_id, "--json").stdout)
    resent = _q(db, "SELECT COUNT(DISTINCT seq) FROM attempts WHERE outcome = 'lost'")[0][0]
    assert report["sent_lost"] == lost and report["sent_twice"] >= resent > 0, report


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_a_run_killed_after_its_last_flush_is_marked_finished(tmp_path):
    r = swarm("run", "--demo", "5", "--headless", "--json", "--quiet")
    run_id = json.loads(r.stdout)["run_id"]
    db = Path(os.environ["SWARM_TUI_DB"])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    with sqlite3.connect(db) as raw:  # as a kill between the last flush and the status
        raw.execute("UPDATE runs SET status='running', pid=?, owner_token='x', wall_ms=0 "
                    "WHERE id=?", (int(dead), run_id))
    listed = json.loads(swarm("runs", "--json").stdout)
    assert listed[0]["status"] == "finished"
    assert _q(db, "SELECT owner_token FROM runs") == [(None,)]
    # the session's time up to its last heartbeat is the run's wall (it never added it)
    [(wall, beat, ended)] = _q(db, "SELECT wall_ms, heartbeat_at, finished_at FROM runs")
    [(session,)] = _q(db, "SELECT MAX(at) FROM events WHERE kind='session_started'")
    assert wall == pytest.approx((beat - session) * 1000) and wall > 0
    assert ended == beat  # it ended with its executor's last sign of life


async def test_an_executor_that_lost_its_claim_cannot_write(sim_factory, db_target):
    server = sim_factory(profile="fixed:30")
    path = db_target
    conn = await open_db(path)
    gw = make_client(server)
    work = tasks(400, prefix="c")
    runner = make_runner(gw, work, concurrency=20)
    claim = take_lock(path, "c")
    await create_run(conn, "c", runner.records, work, name=None,
                     simulated=True, config={}, claim=claim)
    writer = StoreWriter(conn, path, "c", runner, claim=claim, flush_interval=0.05)
    RunRecorder(writer, runner)
    writer.start()
    # another executor (another host) takes the run over — from its own thread: a blocking
    # UPDATE on the engine's loop waited on the writer's open transaction, which needed that
    # loop to commit (under load the takeover then failed and never happened)
    takeover = threading.Thread(target=_q, args=(path, "UPDATE runs SET owner_token='theirs'"))
    runner.consumers.append(lambda e: e.kind == ev.SUCCEEDED and runner.counts["succeeded"] == 50
                            and takeover.start())
    await runner.run()
    takeover.join()
    await writer.close("finished")
    await gw.aclose()
    await conn.close()
    assert writer.failure == "lost_claim" and runner.stop_reason == "lost_claim"
    assert _q(path, "SELECT status, owner_token FROM runs") == [("running", "theirs")]
    stored = _q(path, "SELECT COUNT(*) FROM attempts")[0][0]
    journaled = sum(t == "attempt" for t, _ in read_journal(writer.journal.path))
    assert stored < 400 and stored + journaled == server.app.stats["requests"]


@pytest.mark.slow
def test_a_task_sent_twice_shows_in_report_and_export(any_db):
    r = swarm("run", "--demo", "4", "--headless", "--json", "--quiet", "--sim-rate-429", "0",
              "--sim-rate-503", "0")  # one attempt each: the copy below is the only repeat
    run_id = json.loads(r.stdout)["run_id"]
    cols = ("run_id, seq, number, model, gateway, key_fp, sent_at, queue_ms, latency_ms, "
            "ttft_ms, status_code, error_class, error_message, retry_wait_s, tokens_in, "
            "tokens_out, cached_in, outcome")
    # a second executor's attempt for task 0
    _q(any_db, f"INSERT INTO attempts (uid, {cols}) SELECT 'other:' || id, {cols} FROM "
               "attempts WHERE run_id=? AND seq=0", run_id)
    _q(any_db, "UPDATE runs SET summary_json=NULL")
    rep = swarm("report", run_id)
    assert "SENT MORE THAN ONCE: 1 tasks" in rep.stdout
    rep_json = json.loads(swarm("report", run_id, "--json").stdout)
    assert rep_json["sent_twice"] == 1
    rows = [json.loads(x) for x in swarm("export", run_id).stdout.splitlines()]
    assert [x["sent_twice"] for x in rows] == [True, False, False, False]
    assert len(rows[0]["attempts"]) == 2


# -- bad databases: one line, exit 2, not a byte changed ---------------------------------------
def _sha(p: Path) -> str:
    import hashlib

    return hashlib.sha256(p.read_bytes()).hexdigest()


def _corrupt_db(path: Path) -> None:
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE runs (id TEXT, blob TEXT)")
    raw.executemany("INSERT INTO runs VALUES (?, ?)", [(str(i), "x" * 500) for i in range(200)])
    raw.execute("PRAGMA user_version = 2")
    raw.commit()
    raw.close()
    data = bytearray(path.read_bytes())
    page = 4096
    data[page * 2: page * 6] = os.urandom(page * 4)  # valid header, garbage pages
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("case", ["directory", "garbage", "corrupt-pages", "newer-schema",
                                  "under-a-file"])
@pytest.mark.parametrize("command", [("runs",), ("run", "--demo", "2", "--headless")])
@pytest.mark.slow
def test_bad_database_is_one_line_exit_2_and_unchanged(tmp_path, case, command):
    db = tmp_path / "runs.db"
    needle = {"directory": "is a directory", "garbage": "not a swarm-tui database",
              "corrupt-pages": "corrupt", "newer-schema": "newer than this",
              "under-a-file": "cannot create it"}[case]
    if case == "directory":
        db.mkdir()
    elif case == "garbage":
        db.write_bytes(os.urandom(8192))
    elif case == "corrupt-pages":
        _corrupt_db(db)
    elif case == "newer-schema":
        with sqlite3.connect(db) as raw:
            raw.execute("PRAGMA user_version = 99")
    else:
        (tmp_path / "file").write_text("x")
        db = tmp_path / "file" / "runs.db"
    before = _sha(db) if db.is_file() else None
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "SWARM_TUI_DB": str(db)}
    r = swarm(*command, env=env)
    if case == "under-a-file" and command == ("runs",):  # a path named: not an empty store
        assert_one_line_error(r, 2, f"database {db}", "does not exist")
        return
    assert_one_line_error(r, 2, f"database {db}", needle)
    if before is not None:
        assert _sha(db) == before
        assert not Path(f"{db}-wal").exists()


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_full_disk_when_creating_the_database(tmp_path):
    fs = tmp_path / "full"
    if not _mount_tmpfs(fs, "64k"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        with pytest.raises(OSError):  # fill it to the last block
            (fs / "filler").write_bytes(b"\0" * (1 << 20))
        db = fs / "runs.db"
        r = swarm("run", "--demo", "2", "--headless", env={"SWARM_TUI_DB": str(db)})
        assert_one_line_error(r, 2, f"database {db}", "disk full")
        assert not db.exists()  # nothing half-made left behind
    finally:
        subprocess.run(["umount", "-l", str(fs)], check=False)


# -- only the owner reads what the swarm saw ----------------------------------------------------
@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
async def test_database_wal_journal_locks_and_exports_are_private(tmp_path):
    old = os.umask(0o022)
    try:
        folder = tmp_path / "data" / "swarm"
        db = folder / "runs.db"
        conn = await open_db(db)
        await conn.execute("CREATE TABLE probe (x)")  # the WAL exists once something is written
        assert (folder.stat().st_mode & 0o777) == 0o700
        assert (db.stat().st_mode & 0o777) == 0o600
        assert (Path(f"{db}-wal").stat().st_mode & 0o777) == 0o600
        assert (Path(f"{db}-shm").stat().st_mode & 0o777) == 0o600
        claim = take_lock(db, "r")
        assert (claim.lock_path.parent.stat().st_mode & 0o777) == 0o700
        assert (claim.lock_path.stat().st_mode & 0o777) == 0o600
        claim.release()
        from swarm_tui.store.spill import SpillJournal

        j = SpillJournal(db, "r")
        j.reserve()
        assert j.path is not None and (j.path.stat().st_mode & 0o777) == 0o600
        j.close()
        await conn.close()
        r = swarm("run", "--demo", "2", "--headless", "--json", "--quiet",
                  env={"SWARM_TUI_DB": str(db)})
        run_id = json.loads(r.stdout)["run_id"]
        out = tmp_path / "export.csv"
        swarm("export", run_id, "--format", "csv", "--out", str(out), env={"SWARM_TUI_DB": str(db)})
        assert (out.stat().st_mode & 0o777) == 0o600
    finally:
        os.umask(old)


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_a_database_others_can_read_is_warned_about(tmp_path):
    db = Path(os.environ["SWARM_TUI_DB"])
    swarm("run", "--demo", "2", "--headless", "--quiet")
    db.chmod(0o644)
    r = swarm("runs")
    assert r.returncode == 0
    assert f"chmod 600 '{db}'" in r.stderr and "readable by other users" in r.stderr


@pytest.mark.slow
def test_a_cancel_during_retry_waits_books_each_attempt_once(tmp_path, no_user_config):
    """^C while tasks wait for their retry: each attempt is stored once (the cancel booked
    the waiting task's last attempt a second time: SENT MORE THAN ONCE with nothing sent
    twice), and the gateway's count of requests equals the stored attempts."""
    proc_sim, port = start_sim_process("--profile", "fixed:30", "--rate-503", "0.3")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[gateways.local]\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                   'key_env = ["GW_KEY"]\n')
    db = Path(os.environ["SWARM_TUI_DB"])
    try:
        proc = _popen(*_run_args(_workload(tmp_path, 3000), cfg))
        try:
            # retries scheduled and stored (attempts outnumber results): some tasks wait now
            wait_until(lambda: _results(db) >= 50 and _q(
                db, "SELECT COUNT(*) FROM attempts WHERE outcome = 'error'")[0][0] >= 20,
                "stored retries")
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, err
        sent = _requests(port)
    finally:
        proc_sim.terminate()
        proc_sim.wait(10)
    dupes = _q(db, "SELECT seq, number, COUNT(*) FROM attempts GROUP BY seq, number "
                   "HAVING COUNT(*) > 1")
    assert dupes == []
    # every request the gateway saw is on record; a call cancelled in flight may or may
    # not have reached it before the cancel
    stored = _q(db, "SELECT COUNT(*) FROM attempts")[0][0]
    in_flight = _q(db, "SELECT COUNT(*) FROM attempts WHERE outcome = 'cancelled'")[0][0]
    assert stored - in_flight <= sent <= stored, (stored, in_flight, sent)
    cancelled_waiting = _q(db, "SELECT COUNT(*) FROM results r WHERE r.state = 'cancelled' "
                               "AND EXISTS (SELECT 1 FROM attempts a WHERE a.run_id = r.run_id "
                               "AND a.seq = r.seq)")[0][0]
    assert cancelled_waiting >= 1  # the case itself: tasks cancelled after an attempt
    report = swarm("report", "last")
    assert "SENT MORE THAN ONCE" not in report.stdout, report.stdout
