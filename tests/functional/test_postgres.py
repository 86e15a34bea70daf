"""Past one machine, on a real PostgreSQL (tests/pg_server.py): a console on another host
that watches and pauses a run through the server, the server's roles refusing a
read-only one, runs copied between SQLite and PostgreSQL, and credentials kept off the
command line."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys

import psycopg
import pytest

from swarm_tui.store.target import PgTarget
from tests.conftest import (
    assert_one_line_error,
    new_pg_database,
    pg_login,
    raw_rows,
    swarm,
    throwaway_pg,
    wait_until,
)
from tests.pty_harness import PtyApp


def _as(target: PgTarget, user: str) -> str:
    return target.url.replace("postgresql://postgres@", f"postgresql://{user}@", 1)


@pytest.fixture
def roles_db(pg_server, tmp_path) -> PgTarget:
    """A database with the swarm-tui roles and two people: an operator and a reader."""
    target = new_pg_database(pg_server)
    r = swarm("--db", target.url, "db", "init", "--roles")
    assert r.returncode == 0, r.stderr
    assert "swarm_tui_reader" in r.stdout and "GRANT swarm_tui_reader TO" in r.stdout
    for login, role in (("oncall_op", "swarm_tui_operator"), ("oncall_ro", "swarm_tui_reader")):
        pg_login(pg_server, target, login, role)
    return target


def _results(target: PgTarget) -> int:
    try:
        return int(raw_rows(target, "SELECT COUNT(*) FROM results")[0][0])
    except psycopg.Error:
        return 0


def _live(target: PgTarget) -> dict:
    raw = raw_rows(target, "SELECT live_json FROM runs")[0][0]
    return json.loads(raw) if raw else {}


@pytest.mark.slow
def test_a_console_on_another_host_pauses_the_run_and_a_reader_is_refused(roles_db, tmp_path):
    home = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "XDG_DATA_HOME": str(tmp_path / "data"),
            "XDG_STATE_HOME": str(tmp_path / "state")}
    run = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", "--demo", "4000", "--concurrency", "20",
         "--rate", "80", "--headless", "--quiet"],
        env={**os.environ, **home, "SWARM_TUI_DB": roles_db.url}, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    bastion = {**home, "SWARM_TUI_HOST": "bastion-2"}  # another host: liveness by heartbeat
    apps: list[PtyApp] = []
    try:
        wait_until(lambda: _results(roles_db) > 0, "results in the server")
        run_id = raw_rows(roles_db, "SELECT id FROM runs")[0][0]

        op = PtyApp("--db", _as(roles_db, "oncall_op"), "watch", "--write", env=bastion)
        apps.append(op)
        op.wait_for(lambda t: "RUNNING" in t, what="the run, live from the server")
        op.send("p")
        op.wait_for("PAUSED", what="the pause on screen")
        wait_until(lambda: _live(roles_db).get("paused") is True,
                   "the executor's pause, in the server")
        actors = [a for (a,) in raw_rows(roles_db, "SELECT actor FROM control WHERE run_id=?",
                                         (run_id,))]
        assert actors and actors[0].endswith("(db: oncall_op)")  # OS user and database role
        op.send("p")
        wait_until(lambda: _live(roles_db).get("paused") is False, "the executor's resume")

        ro = PtyApp("--db", _as(roles_db, "oncall_ro"), "watch", "--write", env=bastion)
        apps.append(ro)
        ro.wait_for(lambda t: "RUNNING" in t, what="the run, for the reader too")
        ro.send("p")
        # the toast wraps at 80 columns: its words, in order, across its lines
        screen = ro.wait_for(lambda t: "permission denied" in " ".join(t.split()),
                             what="the server's refusal")
        assert "PAUSED" not in screen
        assert len(raw_rows(roles_db, "SELECT id FROM control")) == 2  # nothing of the reader's
    finally:
        for app in apps:
            app.kill()
        run.send_signal(signal.SIGINT)
        run.wait(60)


@pytest.mark.slow
def test_runs_copied_from_sqlite_into_postgresql_and_back_read_the_same(pg_server, tmp_path):
    laptop = tmp_path / "laptop.db"
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "XDG_DATA_HOME": str(tmp_path / "data")}
    ids = []
    for _ in range(2):
        r = swarm("--db", str(laptop), "run", "--demo", "30", "--headless", "--json",
                  "--quiet", env=env)
        assert r.returncode in (0, 3), r.stderr
        ids.append(json.loads(r.stdout)["run_id"])
    team = new_pg_database(pg_server)
    r = swarm("db", "copy", str(laptop), team.url, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("copied 2 runs")
    again = swarm("db", "copy", str(laptop), team.url, env=env)
    assert "copied 0 runs" in again.stdout and "2 already there" in again.stdout
    back = tmp_path / "back.db"
    assert swarm("db", "copy", team.url, str(back), "--run", ids[1], env=env).returncode == 0
    for run_id in ids[:1]:  # the other one is in the listing below
        for command in (["report", run_id, "--json"], ["cost", run_id, "--json"],
                        ["export", run_id, "--format", "jsonl"]):
            here = swarm("--db", str(laptop), *command, env=env)
            there = swarm("--db", team.url, *command, env=env)
            assert here.returncode == there.returncode == 0, (here.stderr, there.stderr)
            if command[0] == "export":  # rows as stored: the same bytes
                assert here.stdout == there.stdout, command
            else:  # sums: each engine adds floats in its own order (last-digit differences)
                assert json.loads(here.stdout) == _approx(json.loads(there.stdout)), command
    assert json.loads(swarm("--db", str(back), "runs", "--json", env=env).stdout)[0]["id"] == ids[1]
    # each run's stored replay timeline went with it, byte for byte, and opens the same
    laptop_rows = sqlite3.connect(laptop).execute(
        "SELECT run_id, data FROM replay_index ORDER BY run_id").fetchall()
    assert [(r, bytes(d)) for r, d in raw_rows(team, "SELECT run_id, data FROM replay_index "
                                                     "ORDER BY run_id")] == laptop_rows
    assert len(laptop_rows) == 2
    statuses = []
    for db in (str(laptop), team.url):
        shot = swarm("--db", db, "replay", ids[0], "--at", "+0.5s", "--screenshot",
                     str(tmp_path / "at.svg"), env=env)
        assert shot.returncode == 0, shot.stderr
        statuses.append(shot.stdout)
    assert statuses[0] == statuses[1] and ids[0] in statuses[0]
    assert_one_line_error(swarm("db", "copy", str(laptop), team.url, "--run", "nope", env=env),
                          2, "no run nope")


def _approx(value):
    if isinstance(value, float):
        return pytest.approx(value, rel=1e-12, abs=1e-12)
    if isinstance(value, dict):
        return {k: _approx(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_approx(v) for v in value]
    return value


@pytest.mark.slow
def test_a_password_never_goes_on_the_command_line(tmp_path):
    url = "postgresql://alice:s3cret-pw@127.0.0.1:9/x"
    for args in (["--db", url, "runs"], ["db", "copy", url, str(tmp_path / "x.db")]):
        r = swarm(*args)
        assert_one_line_error(r, 2, "password on the command line", "PGPASSWORD")
        assert "s3cret-pw" not in r.stderr + r.stdout


@pytest.mark.slow
def test_an_unreachable_server_is_one_line(tmp_path):
    r = swarm("--db", "postgresql://nobody@127.0.0.1:9/none", "runs")
    assert_one_line_error(r, 2, "database postgresql://nobody@127.0.0.1:9/none")


@pytest.mark.slow
def test_a_server_over_tls_is_verified_as_psql_verifies_it(tmp_path, no_user_config,
                                                          monkeypatch):
    """`sslmode=verify-full` and the team's CA in `sslrootcert`, passed through to libpq as
    written (docs/postgres-and-workers.md): a run and its reading commands go through;
    another CA, or none given, is one line and exit 2 naming the database."""
    import trustme

    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.postgresql/root.crt of this machine's
    for name in ("PGSSLROOTCERT", "PGSSLMODE", "PGSSLCERT", "PGSSLKEY"):
        monkeypatch.delenv(name, raising=False)
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    chain = b"".join(pem.bytes() for pem in issued.cert_chain_pems)
    good, other = tmp_path / "team-ca.pem", tmp_path / "other-ca.pem"
    ca.cert_pem.write_to_path(str(good))
    trustme.CA().cert_pem.write_to_path(str(other))
    gen = throwaway_pg(tls=(chain, issued.private_key_pem.bytes()))
    server = next(gen)
    try:
        base = new_pg_database(server).url + "?sslmode=verify-full&sslrootcert="
        r = swarm("--db", base + str(good), "run", "--demo", "5", "--headless", "--quiet",
                  "--json")
        assert r.returncode in (0, 3), r.stderr
        run_id = json.loads(r.stdout)["run_id"]
        r = swarm("--db", base + str(good), "runs", "--json")
        assert r.returncode == 0 and [x["id"] for x in json.loads(r.stdout)] == [run_id]
        assert_one_line_error(swarm("--db", base + str(other), "runs"), 2, "database ",
                              "certificate verify failed")
        no_root = base.split("&sslrootcert=")[0]
        assert_one_line_error(swarm("--db", no_root, "runs"), 2, "database ", "root.crt")
        # the server says the connection is TLS (not a plain one it also accepts)
        with psycopg.connect(base + str(good)) as c:
            assert c.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
                             ).fetchone() == (True,)
    finally:
        gen.close()


@pytest.mark.slow
def test_the_planner_knows_a_new_run_right_after_it(pg_server, tmp_path):
    """A new run id is in no planner statistics until the store ANALYZEs: PostgreSQL then
    guesses one row and joins the run's rows by nested loops (a report right after a
    20,000-task run took 138 s). The second run's estimate must be its size, not 1."""
    target = new_pg_database(pg_server)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "XDG_DATA_HOME": str(tmp_path / "data")}
    for _ in range(2):  # the first run's statistics exist when the second one starts
        r = swarm("--db", target.url, "run", "--demo", "1500", "--headless", "--quiet",
                  "--json", "--sim-profile", "fixed:5", env=env, timeout=120)
        assert r.returncode in (0, 3), r.stderr
        run_id = json.loads(r.stdout)["run_id"]
    for table in ("tasks", "results", "attempts"):
        plan = raw_rows(target, f"EXPLAIN SELECT * FROM {table} WHERE run_id = ?", (run_id,))
        estimate = int(plan[0][0].split("rows=")[1].split()[0])
        assert estimate >= 500, (table, plan)  # ~1,500 (sampled), never the guess of 1


@pytest.mark.slow
def test_no_role_can_write_around_the_audit_trail(roles_db, pg_server):
    """The operator pauses and moves the canary only through the audited functions; a
    direct INSERT or UPDATE of the control queue, the canary, its audit log or the events
    is refused by the server for the operator and (but for its own events and marking
    commands done) the executor; the audit names the role from session_user, whatever
    OS user the caller claims."""
    with psycopg.connect(pg_server.url(), autocommit=True) as admin:
        admin.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = "
                      "'runner_x') THEN CREATE ROLE runner_x LOGIN; END IF; END $$")
        admin.execute("GRANT swarm_tui_executor TO runner_x")
    forged = {
        "control": "INSERT INTO control (run_id, at, actor, command, arg) VALUES "
                   "('r', 0, 'someone else', 'pause', NULL)",
        "canary": "INSERT INTO canary (name, baseline, candidate, status, pct, "
                  "stage_started_at, bake_started_at, failures, version, updated_at) VALUES "
                  "('a->b', 'a', 'b', 'complete', 100, 0, 0, 0, 0, 0)",
        "canary_actions": "INSERT INTO canary_actions (name, at, action, actor, source) "
                          "VALUES ('a->b', 0, 'promote', 'someone else', 'cli')",
        "canary update": "UPDATE canary SET pct = 100",
        "events": "UPDATE events SET detail_json = 'rewritten'",
    }
    for login in ("oncall_op", "runner_x"):
        url = _as(roles_db, login)
        for what, sql in forged.items():
            with psycopg.connect(url, autocommit=True) as c, \
                    pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(sql)
                pytest.fail(f"{login} wrote {what}")
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("SELECT swarm_tui_queue_command('r1', 'pause', NULL, 'claims-to-be-root')")
            c.execute("SELECT swarm_tui_canary_create('a->b', 'a', 'b', 'progressing', 5, 0, 0, "
                      "0, 'claims-to-be-root', 'cli', 'test')")
    actors = [a for (a,) in raw_rows(roles_db, "SELECT actor FROM control ORDER BY id")]
    assert actors == ["claims-to-be-root (db: oncall_op)", "claims-to-be-root (db: runner_x)"]
    audit = raw_rows(roles_db, "SELECT action, actor FROM canary_actions ORDER BY id")
    assert audit == [("start", "claims-to-be-root (db: oncall_op)")]  # created once
    # a reader may call none of them
    with psycopg.connect(_as(roles_db, "oncall_ro"), autocommit=True) as c, \
            pytest.raises(psycopg.errors.InsufficientPrivilege):
        c.execute("SELECT swarm_tui_queue_command('r1', 'pause', NULL, 'x')")
