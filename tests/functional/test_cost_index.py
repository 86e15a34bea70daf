"""A finished run's cost breakdown is summed once, at its end (store/cost_index.py), and
read back by `cost` and `report`: the same figures, byte for byte, as summing the rows;
one that no longer matches its run (a resume added results) is summed again."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.conftest import demo_run, raw_rows, swarm, wait_until

pytestmark = pytest.mark.slow


def _rows(db) -> list[tuple]:
    c = sqlite3.connect(db)
    try:
        return c.execute("SELECT run_id, results, steps, data FROM cost_index").fetchall()
    finally:
        c.close()


def _sql(db, statement: str, *params) -> None:
    c = sqlite3.connect(db)
    c.execute(statement, params)
    c.commit()
    c.close()


def test_the_stored_breakdown_reads_as_the_rows_sum_and_a_stale_one_is_summed_again(
        tmp_path):
    db, run_id, env = demo_run(tmp_path, "300", "--sim-rate-503", "0.05")
    ((stored_id, results, steps, data),) = _rows(db)  # kept by the run's end
    assert (stored_id, results, steps) == (run_id, 300, 30)
    assert sum(group["tasks"] for group in json.loads(data)) > 250  # the succeeded tasks

    def both() -> tuple[str, str]:
        cost = swarm("cost", run_id, "--json", env=env)
        report = swarm("report", run_id, "--json", env=env)
        assert cost.returncode == 0 and report.returncode == 0, cost.stderr + report.stderr
        return cost.stdout, report.stdout

    from_index = both()
    _sql(db, "DELETE FROM cost_index")
    from_rows = both()  # summed from the rows, and kept again by that read
    assert from_rows == from_index
    assert json.loads(from_rows[0])["total"]["tasks"] > 250
    assert [r[3] for r in _rows(db)] == [data]

    # what is read is the stored row: planted figures show …
    planted = json.loads(data)
    planted[0]["tasks"] += 1000  # tasks of the first group
    _sql(db, "UPDATE cost_index SET data=?", json.dumps(planted))
    assert json.loads(both()[0])["total"]["tasks"] == json.loads(from_index[0])["total"][
        "tasks"] + 1000
    # … until the run no longer is the one they were summed for: a result more (as a
    # resume adds), or another end
    _sql(db, "UPDATE cost_index SET results = results - 1")
    assert both() == from_index
    _sql(db, "UPDATE cost_index SET data=?, finished_at = finished_at - 1",
         json.dumps(planted))
    assert both() == from_index
    _sql(db, "UPDATE cost_index SET data='not json'")  # nor a row that is not one
    assert both() == from_index


def test_a_store_that_refuses_the_breakdown_still_reports_it(tmp_path):
    """Keeping it is a convenience: a database that refuses it (a trigger, as a full disk
    would) leaves the run and its `cost` as they were, summed from the rows."""
    env = {"SWARM_TUI_DB": str(tmp_path / "runs.db"), "XDG_CONFIG_HOME": str(tmp_path / "x")}
    r = swarm("run", "--demo", "5", "--headless", "--quiet", env=env, timeout=60)
    assert r.returncode in (0, 3), r.stderr
    _sql(tmp_path / "runs.db", "CREATE TRIGGER no_cost BEFORE INSERT ON cost_index "
         "BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END")
    r = swarm("run", "--demo", "40", "--headless", "--quiet", "--json", env=env, timeout=60)
    assert r.returncode in (0, 3), r.stderr  # 3: the demo missed its SLA (its own verdict)
    assert r.stderr.strip() == ""
    run_id = json.loads(r.stdout)["run_id"]
    assert run_id not in {row[0] for row in _rows(tmp_path / "runs.db")}
    cost = swarm("cost", run_id, "--json", env=env)
    assert cost.returncode == 0 and "Traceback" not in cost.stderr, cost.stderr
    succeeded = json.loads(r.stdout)["succeeded"]
    assert json.loads(cost.stdout)["total"]["tasks"] == succeeded > 30


def test_on_postgresql_the_run_keeps_its_breakdown_and_a_reader_reads_it(pg_server, tmp_path):
    """The executor keeps it on the server; a reader, who may not write one, reads it, and
    reads the same figures summed from the rows once it is gone (keeping nothing)."""
    import psycopg

    from tests.conftest import new_pg_database, pg_login, raw_rows

    target = new_pg_database(pg_server)
    r = swarm("--db", target.url, "db", "init", "--roles")
    assert r.returncode == 0, r.stderr
    reader = pg_login(pg_server, target, "cost_ro").url
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    r = swarm("--db", target.url, "run", "--demo", "120", "--headless", "--quiet", "--json",
              env=env, timeout=120)
    assert r.returncode in (0, 3), r.stderr
    run_id = json.loads(r.stdout)["run_id"]
    ((stored_id, results),) = raw_rows(target, "SELECT run_id, results FROM cost_index")
    assert (stored_id, results) == (run_id, 120)
    from_index = swarm("--db", reader, "cost", run_id, "--json", env=env)
    assert from_index.returncode == 0, from_index.stderr
    with psycopg.connect(target.url, autocommit=True) as admin:
        admin.execute("DELETE FROM cost_index")
    from_rows = swarm("--db", reader, "cost", run_id, "--json", env=env)
    assert from_rows.returncode == 0 and from_rows.stderr.strip() == "", from_rows.stderr
    assert from_rows.stdout == from_index.stdout
    assert json.loads(from_rows.stdout)["total"]["tasks"] > 100
    assert raw_rows(target, "SELECT COUNT(*) FROM cost_index")[0][0] == 0  # kept nothing


def test_a_run_stopped_then_resumed_reports_the_cost_of_all_it_did(tmp_path):
    """A ^C ends a run (its breakdown kept, as a reader asks for it); `resume` adds the
    rest: the breakdown read after it is the whole run's, as summing its rows gives."""
    import os
    import signal
    import subprocess
    import sys

    db = tmp_path / "runs.db"
    env = {"SWARM_TUI_DB": str(db), "XDG_CONFIG_HOME": str(tmp_path / "x")}
    run = subprocess.Popen([sys.executable, "-m", "swarm_tui", "run", "--demo", "400",
                            "--rate", "50", "--headless", "--quiet"],
                           env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    def forty_stored() -> bool:
        try:
            return raw_rows(db, "SELECT COUNT(*) FROM results")[0][0] >= 40
        except sqlite3.Error:
            return False  # not created yet

    try:
        wait_until(lambda: run.poll() is not None or forty_stored(), "40 results stored", 60)
        run.send_signal(signal.SIGINT)
    finally:
        run.wait(60)
    assert run.returncode == 130, run.stderr.read()
    before = swarm("cost", "last", "--json", env=env)
    assert before.returncode == 0, before.stderr
    stopped = json.loads(before.stdout)["total"]["tasks"]
    assert 40 <= stopped < 400 and len(_rows(db)) == 1  # kept at the ^C's end
    run_id = json.loads(before.stdout)["run_id"]
    r = swarm("resume", run_id, "--headless", "--quiet", env=env, timeout=120)
    assert r.returncode in (0, 3), r.stderr
    after = swarm("cost", run_id, "--json", env=env)
    assert after.returncode == 0, after.stderr
    whole = json.loads(after.stdout)["total"]["tasks"]
    assert whole > stopped and whole >= 390, (stopped, whole)
    _sql(db, "DELETE FROM cost_index")
    assert swarm("cost", run_id, "--json", env=env).stdout == after.stdout
