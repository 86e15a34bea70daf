"""Stored runs from the command line: report = run, live readers, crash + resume, export."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from tests.conftest import TEST_KEY, assert_one_line_error, swarm


def _workload(tmp_path, n: int, max_tokens: int = 16):
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"id": f"t{i:05d}", "prompt": f"task {i}",
                                     "max_tokens": max_tokens}) + "\n" for i in range(n)))
    return w


def _served(port: int) -> int:
    return httpx2.get(f"http://127.0.0.1:{port}/sim/stats").json().get("served", 0)


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_run_and_report_print_the_same_summary():
    r = swarm("run", "--demo", "60", "--headless", "--json", "--quiet")
    assert r.returncode in (0, 3), r.stderr
    ran = json.loads(r.stdout)
    rep = swarm("report", ran["run_id"], "--json")
    assert rep.returncode == 0, rep.stderr
    assert json.loads(rep.stdout) == ran
    text_run = swarm("report", ran["run_id"])
    assert text_run.stdout.startswith(f"SIMULATED run {ran['run_id']} [finished]")
    # `last` names the newest run (on call: no `runs` first)
    last = swarm("report", "last", "--json")
    assert last.returncode == 0, last.stderr
    assert json.loads(last.stdout) == ran
    cost = swarm("cost", "last", "--json")
    assert cost.returncode == 0 and json.loads(cost.stdout)["run_id"] == ran["run_id"]


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_readers_see_progress_while_a_run_writes(tmp_path, sim_proc):
    _port, cfg = sim_proc
    w = _workload(tmp_path, 3000)
    env = {**os.environ, "GW_KEY": TEST_KEY}
    # 10 in flight: ~15 s of run, so a loaded machine still polls it several times
    run = subprocess.Popen([sys.executable, "-m", "swarm_tui", "run", str(w), "--config",
                            str(cfg), "--concurrency", "10", "--headless", "--quiet"],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL)
    try:
        seen = []
        last: tuple = ()
        deadline = time.time() + 60
        while time.time() < deadline and len(seen) < 3 and run.poll() is None:
            r = swarm("runs", "--json")
            items = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else []
            last = (r.returncode, r.stderr[-300:], [(i["status"], i["done"]) for i in items])
            if items and items[0]["status"] == "running" and 0 < items[0]["done"] < 3000:
                seen.append(items[0]["done"])
                rep = swarm("report", items[0]["id"], "--json")
                assert rep.returncode == 0 and json.loads(rep.stdout)["status"] == "running"
            time.sleep(0.3)
        assert len(seen) == 3 and seen[0] < seen[-1], (seen, last, run.poll())
        run.send_signal(signal.SIGINT)  # seen enough: end it as an operator's ^C does
    finally:
        run.wait(60)
    assert run.returncode == 130, run.stderr.read()
    final = json.loads(swarm("runs", "--json").stdout)[0]
    assert final["status"] == "cancelled" and seen[-1] <= final["done"] < 3000, final


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_sigkill_then_resume_sends_only_what_was_not_stored(tmp_path, sim_proc):
    port, cfg = sim_proc
    n, conc = 2000, 40
    w = _workload(tmp_path, n)
    db = os.environ["SWARM_TUI_DB"]
    env = {**os.environ, "GW_KEY": TEST_KEY}
    run = subprocess.Popen([sys.executable, "-m", "swarm_tui", "run", str(w), "--config",
                            str(cfg), "--concurrency", str(conc), "--headless", "--quiet"],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           stdin=subprocess.DEVNULL)
    stored = 0
    deadline = time.time() + 60
    while time.time() < deadline and stored < 600:
        time.sleep(0.05)
        try:
            with sqlite3.connect(db, timeout=5) as raw:
                stored = raw.execute(
                    "SELECT COUNT(*) FROM task_results WHERE state='succeeded'").fetchone()[0]
        except sqlite3.OperationalError:
            pass
    os.kill(run.pid, signal.SIGKILL)
    killed_at = time.time()
    run.wait(10)
    assert 600 <= stored < n, "the kill must land mid-run"
    # the dead client's calls still being answered settle (the server's own gauge)
    deadline = time.monotonic() + 60
    while httpx2.get(f"http://127.0.0.1:{port}/sim/stats").json().get("active", 0):
        assert time.monotonic() < deadline, "the server never finished the dead client's calls"
        time.sleep(0.05)
    runs = json.loads(swarm("runs", "--json").stdout)
    assert runs[0]["status"] == "interrupted"
    run_id = runs[0]["id"]
    # its wall time runs to its last heartbeat (a killed session never added its own)
    with sqlite3.connect(db) as raw:
        started, beat = raw.execute("SELECT started_at, heartbeat_at FROM runs").fetchone()
    cut = json.loads(swarm("report", run_id, "--json").stdout)
    assert cut["wall_ms"] == pytest.approx((beat - started) * 1000, abs=1500), cut["wall_ms"]
    assert 0 < cut["wall_ms"] <= (killed_at - started) * 1000 and cut["calls_per_s"]
    with sqlite3.connect(db) as raw:
        before = dict(raw.execute("SELECT task_id, latency_ms FROM task_results "
                                  "WHERE state='succeeded'").fetchall())
        rate_rows = raw.execute("SELECT finished_at FROM task_results WHERE state='succeeded' "
                                "ORDER BY finished_at DESC").fetchall()
    served_before = _served(port)
    lost = served_before - len(before)  # served by the gateway, not stored before the kill
    last = rate_rows[0][0]
    per_s = sum(1 for (t,) in rate_rows if t > last - 1.0)  # throughput just before the kill
    # The writer commits every 250 ms, but a commit that carries a WAL checkpoint can take
    # a few hundred ms on a loaded machine (measured up to ~0.6 s), during which results
    # wait in memory: allow one second of throughput plus what was in flight.
    window = per_s * 1.0
    assert 0 <= lost <= window + conc, (lost, window)

    r = swarm("resume", run_id, "--config", str(cfg), "--json", "--quiet",
              env={"GW_KEY": TEST_KEY})
    assert r.returncode in (0, 3), r.stderr
    out = json.loads(r.stdout)
    assert out["run_id"] == run_id and out["total"] == n and out["succeeded"] == n
    assert out["wall_ms"] > cut["wall_ms"]  # both sessions' time
    resumed = n - len(before)
    assert _served(port) - served_before == resumed  # only the unstored tasks were sent
    with sqlite3.connect(db) as raw:
        after = dict(raw.execute("SELECT task_id, latency_ms FROM task_results "
                                 "WHERE state='succeeded'").fetchall())
        assert raw.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == n
        dup = raw.execute("SELECT COUNT(*) FROM (SELECT seq FROM attempts GROUP BY seq "
                          "HAVING SUM(outcome='ok') > 1)").fetchone()[0]
    assert dup == 0  # no task has two successful attempts
    assert all(after[k] == v for k, v in before.items())  # stored results untouched
    assert len(after) == n
    again = swarm("resume", run_id, "--config", str(cfg), env={"GW_KEY": TEST_KEY})
    assert again.returncode in (0, 3) and "nothing to resume" in again.stderr


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_resume_refuses_a_live_run_and_unknown_ids(tmp_path):
    r = swarm("run", "--demo", "5", "--headless", "--json", "--quiet")
    run_id = json.loads(r.stdout)["run_id"]
    from swarm_tui.store.claims import take_lock

    db = Path(os.environ["SWARM_TUI_DB"])
    claim = take_lock(db, run_id)  # this process plays a live executor holding the run
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE runs SET status='running', heartbeat_at=?, pid=?, host=?, "
                    "lock_path=?, owner_token=? WHERE id=?",
                    (time.time() - 3600, claim.pid, claim.host, str(claim.lock_path),
                     claim.token, run_id))
    assert_one_line_error(swarm("resume", run_id), 2, "still being executed")
    claim.release()
    assert_one_line_error(swarm("report", "nope"), 2, "run nope: not found")
    assert_one_line_error(swarm("export", "nope"), 2, "run nope: not found")


@pytest.mark.slow
@pytest.mark.usefixtures("no_user_config")
@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_export_whose_reader_leaves_ends_quietly(tmp_path, fmt):
    """`swarm-tui export RUN | head`: the reader leaves after a few bytes. Exit 0 and not a
    word on stderr (the rows' generator, finalised after the database closed, printed a
    traceback)."""
    from tests.conftest import demo_run

    _db, run_id, env = demo_run(tmp_path, "600", "--rate", "0")
    proc = subprocess.Popen([sys.executable, "-m", "swarm_tui", "export", run_id, "--format",
                             fmt], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **env})
    assert proc.stdout is not None and proc.stderr is not None
    assert len(proc.stdout.read(100)) == 100
    proc.stdout.close()  # the reader leaves with the export unfinished (> a pipe's 64 KiB)
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    assert err == b"", err


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_export_csv_and_jsonl_carry_no_key(tmp_path, sim_proc):
    _port, cfg = sim_proc
    w = _workload(tmp_path, 20)
    r = swarm("run", str(w), "--config", str(cfg), "--headless", "--json", "--quiet",
              env={"GW_KEY": TEST_KEY})
    run_id = json.loads(r.stdout)["run_id"]
    out_csv = tmp_path / "x.csv"
    e = swarm("export", run_id, "--format", "csv", "--out", str(out_csv))
    assert e.returncode == 0 and "exported 20 tasks" in e.stderr
    lines = out_csv.read_text().splitlines()
    assert lines[0].startswith("run_id,seq,task_id,state") and len(lines) == 21
    j = swarm("export", run_id, "--format", "jsonl")
    rows = [json.loads(x) for x in j.stdout.splitlines()]
    assert len(rows) == 20 and all(len(x["attempts"]) == 1 for x in rows)
    assert rows[0]["key_fp"].startswith("sk-…")
    db = os.environ["SWARM_TUI_DB"]
    # every task input travels with the export: a bucket can be re-derived from it alone
    w2 = tmp_path / "w2.jsonl"
    w2.write_text(json.dumps({"id": "u1", "prompt": "line one\nline two", "user_id": "user-7",
                              "model": "kimi-k2.5", "max_tokens": 8,
                              "metadata": {"team": "ops"}}) + "\n")
    r2 = swarm("run", str(w2), "--config", str(cfg), "--headless", "--json", "--quiet",
               env={"GW_KEY": TEST_KEY})
    run2 = json.loads(r2.stdout)["run_id"]
    row = json.loads(swarm("export", run2, "--format", "jsonl").stdout)
    assert row["input"]["user_id"] == "user-7" and row["input"]["model"] == "kimi-k2.5"
    assert row["input"]["metadata"] == {"team": "ops"}
    import csv
    import io
    recs = list(csv.DictReader(io.StringIO(swarm("export", run2, "--format", "csv").stdout)))
    assert len(recs) == 1 and recs[0]["input_user_id"] == "user-7"
    assert json.loads(recs[0]["input_metadata"]) == {"team": "ops"}
    assert recs[0]["input_prompt"] == "line one\nline two"
    files = [pathlib.Path(db), pathlib.Path(db + "-wal"), out_csv]
    blobs = [f.read_bytes() for f in files if f.exists()] + [j.stdout.encode(), r.stdout.encode()]
    for blob in blobs:
        assert TEST_KEY.encode() not in blob


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_locked_database_is_one_line_exit_2():
    r = swarm("run", "--demo", "2", "--headless", "--quiet")
    assert r.returncode in (0, 3)
    holder = sqlite3.connect(os.environ["SWARM_TUI_DB"], isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        r = swarm("run", "--demo", "2", "--headless", "--quiet")
        # a reader (on its own thread: store/direct.py) is not held up by a writer: WAL
        read = swarm("report", "last")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # the holder named (this test's own process, not stopped)
    assert_one_line_error(r, 2, f"locked by another process: pid {os.getpid()} (",
                          "; try again once it is done")
    assert read.returncode == 0 and "SLA" in read.stdout, read.stderr


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_a_database_locked_by_a_stopped_process_names_it_and_how_to_continue_it():
    """A process stopped inside a write (Ctrl-Z, SIGSTOP, a debugger) holds SQLite's one
    write lock until it continues: the line says which process, that it is stopped, and
    the command that lets it finish."""
    r = swarm("run", "--demo", "2", "--headless", "--quiet")
    assert r.returncode in (0, 3)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import os, signal, sqlite3, sys\n"
         "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "c.execute('BEGIN IMMEDIATE')\n"
         "c.execute('DELETE FROM events')\n"
         "print('held', flush=True)\n"
         "os.kill(os.getpid(), signal.SIGSTOP)\n", os.environ["SWARM_TUI_DB"]],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        stat = Path(f"/proc/{holder.pid}/stat")
        deadline = time.monotonic() + 30
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "T":
            assert time.monotonic() < deadline, "the holder never stopped"
            time.sleep(0.01)
        r = swarm("run", "--demo", "2", "--headless", "--quiet")
        name = Path(sys.executable).name[:15]  # the kernel's name for it (comm)
        assert_one_line_error(
            r, 2, f"database {os.environ['SWARM_TUI_DB']}: locked by another process: pid "
                  f"{holder.pid} ({name}), which is stopped; nothing can be written until it "
                  f"continues (kill -CONT {holder.pid})")
    finally:
        holder.kill()
        holder.wait(10)
    # the stopped writer's change never landed: the database is as the first run left it
    with sqlite3.connect(os.environ["SWARM_TUI_DB"]) as c:
        assert c.execute("SELECT COUNT(*) FROM events").fetchone()[0] > 0


def test_compare_shows_a_rate_change_in_percentage_points_and_calls_per_s_counts_calls():
    """92.38 → 93.90 % is +1.52 pp (it read "+1.6 %"); calls per second count every
    answered call, retries included (they counted tasks)."""
    from swarm_tui.core.summary import RunSummary, SummaryBuilder
    from swarm_tui.report.history import compare_rows, compare_table
    from swarm_tui.settings.sections import SlaConfig

    a = RunSummary(run_id="a", total=10_000, success_rate=0.9238)
    b = RunSummary(run_id="b", total=10_000, success_rate=0.9390)
    rate = next(r for r in compare_rows(a, b) if r["metric"] == "success rate")
    assert rate["change_pp"] == pytest.approx(1.52) and rate["change_pct"] is None
    assert "+1.52 pp" in compare_table(a, b)

    class Row:  # one task answered on its third call
        state, latency_ms, ttft_ms, queue_ms = "succeeded", 100.0, 50.0, 0.0
        model, gateway, bucket = "m", "g", "baseline"
        tokens_in, tokens_out, cached_in, usage_estimated = 10, 10, 0, False
        cost_usd, error_class, calls_ok, calls_failed = 0.001, None, 1, 2

    builder = SummaryBuilder()
    builder.add(Row())
    summary = builder.summary(run_id="r", sla=SlaConfig(), wall_ms=1000.0)
    assert summary.calls_per_s == pytest.approx(3.0)


@pytest.mark.slow
def test_runs_of_a_database_path_that_does_not_exist_is_an_error_not_an_empty_store(tmp_path):
    from tests.conftest import assert_one_line_error

    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "XDG_DATA_HOME": str(tmp_path / "data")}
    r = swarm("runs", "--db", str(tmp_path / "typo" / "x.db"), env=env)
    assert_one_line_error(r, 2, "does not exist", "x.db")
    # no path named and nothing recorded yet (the per-user default): an empty store
    r = swarm("runs", env={**env, "SWARM_TUI_DB": ""})
    assert r.returncode == 0 and "no runs recorded yet" in r.stdout, r.stderr
