"""PostgreSQL faults under a live run: the server restarted (`pg_ctl stop -m immediate`),
a backend terminated. Each on a server of its own (the suite's shared one keeps running),
against a gateway in its own process that counts what it was sent: requests = stored
attempts, every task answered once, no traceback — or, past the store's grace, exit 2
with the unsaved answers journaled and imported by `resume`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import psycopg
import pytest

from swarm_tui.store.target import PgTarget
from tests.conftest import (
    TEST_KEY,
    new_pg_database,
    raw_rows,
    sim_gateway,
    throwaway_pg,
    wait_until,
)
from tests.pg_server import ThrowawayPostgres

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
def own_pg() -> Iterator[ThrowawayPostgres]:
    """A server of the test's own, with durable commits: it is crashed on purpose."""
    yield from throwaway_pg(durable=True)


@pytest.fixture
def gateway(tmp_path) -> Iterator[tuple[int, Path]]:
    yield from sim_gateway(tmp_path, "fixed:100")


def _requests(port: int) -> int:
    return httpx2.get(f"http://127.0.0.1:{port}/sim/stats").json().get("requests", 0)


def _results(db: PgTarget) -> int:
    try:
        return raw_rows(db, "SELECT COUNT(*) FROM results")[0][0]
    except psycopg.errors.UndefinedTable:
        return 0


def _workload(tmp_path: Path, n: int) -> Path:
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"id": f"t{i:05d}", "prompt": f"task {i}",
                                     "max_tokens": 16}) + "\n" for i in range(n)))
    return w


def _start(tmp_path: Path, cfg: Path, db: PgTarget, n: int, *extra: str,
           grace_s: float = 60.0) -> subprocess.Popen:
    with cfg.open("a") as f:
        f.write(f"[store]\nunwritable_grace_s = {grace_s}\n")
    return subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", str(_workload(tmp_path, n)), "--config",
         str(cfg), "--concurrency", "20", "--headless", "--json", "--quiet", *extra],
        env={**os.environ, "GW_KEY": TEST_KEY, "SWARM_TUI_DB": db.url},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def _finish(proc: subprocess.Popen, timeout: float = 150) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()


def _paid_once(db: PgTarget, port: int, n: int) -> None:
    """Every task answered once; every request the gateway saw is a stored attempt."""
    assert raw_rows(db, "SELECT COUNT(*) FROM results WHERE state = 'succeeded'")[0][0] == n
    assert raw_rows(db, "SELECT COUNT(*) FROM attempts")[0][0] == _requests(port)
    assert raw_rows(db, "SELECT COUNT(*) FROM (SELECT seq FROM attempts WHERE outcome = 'ok' "
                        "GROUP BY seq HAVING COUNT(*) > 1) twice")[0][0] == 0


def test_a_ten_second_server_restart_loses_nothing(tmp_path, own_pg, gateway):
    """The writer, the canary and the listener reconnect once the server is back; the
    run holds dispatch while it cannot store (answers in flight are kept and journaled),
    then finishes. It used to hang every component and lose the answers it had."""
    port, cfg = gateway
    db = new_pg_database(own_pg)
    n = 1500
    proc = _start(tmp_path, cfg, db, n)
    try:
        wait_until(lambda: _results(db) >= 200, "200 stored results")
        own_pg.crash()
        time.sleep(10)  # the outage itself: 10 s, as the restart
        held = _requests(port)
        own_pg.start_again()
        out, err = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
    assert proc.returncode in (0, 3), err
    assert "Traceback" not in err and "never retrieved" not in err, err
    summary = json.loads(out)
    assert summary["status"] == "finished" and summary["succeeded"] == n, (
        raw_rows(db, "SELECT state, COUNT(*) FROM results GROUP BY state"),
        raw_rows(db, "SELECT kind, detail_json FROM events")[:20])
    _paid_once(db, port, n)
    # dispatch was held during the outage: at most the calls in flight went out after
    assert held < n, held


def test_a_server_down_past_the_grace_exits_2_and_resume_imports_the_journal(
        tmp_path, own_pg, gateway):
    port, cfg = gateway
    db = new_pg_database(own_pg)
    n = 1500
    proc = _start(tmp_path, cfg, db, n, grace_s=3.0)
    try:
        wait_until(lambda: _results(db) >= 200, "200 stored results")
        stored_before = _results(db)
        own_pg.crash()
        _out, err = _finish(proc, timeout=60)  # the grace, then the calls in flight
    finally:
        if own_pg and not (own_pg.data / "postmaster.pid").exists():
            own_pg.start_again()
    assert proc.returncode == 2, (proc.returncode, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err and "never retrieved" not in err, err
    assert any("journaled to" in ln for ln in lines), err
    sent_then = _requests(port)
    run_id = raw_rows(db, "SELECT id FROM runs")[0][0]
    assert _results(db) >= stored_before
    r = subprocess.run([sys.executable, "-m", "swarm_tui", "resume", run_id, "--json",
                        "--quiet", "--config", str(cfg)],
                       env={**os.environ, "GW_KEY": TEST_KEY, "SWARM_TUI_DB": db.url},
                       capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=150)
    assert r.returncode in (0, 3), r.stderr
    assert json.loads(r.stdout)["succeeded"] == n
    # the journaled answers were imported, not paid again: each request is a stored attempt
    _paid_once(db, port, n)
    assert _requests(port) >= sent_then


def test_a_terminated_backend_is_reconnected(tmp_path, own_pg, gateway):
    """`pg_terminate_backend` of every connection of the run (an admin, a pooler's
    reset): each component reconnects; nothing is lost or sent twice."""
    port, cfg = gateway
    db = new_pg_database(own_pg)
    n = 1500
    proc = _start(tmp_path, cfg, db, n)
    try:
        wait_until(lambda: _results(db) >= 200, "200 stored results")
        with psycopg.connect(own_pg.url(), autocommit=True) as admin:
            killed = admin.execute(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                "application_name LIKE 'swarm-tui%' AND pid <> pg_backend_pid()").fetchone()
        assert killed is not None and killed[0] >= 2
        out, err = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (0, 3), err
    assert "Traceback" not in err and "never retrieved" not in err, err
    assert json.loads(out)["succeeded"] == n
    _paid_once(db, port, n)


def test_workers_ride_out_a_ten_second_restart(tmp_path, own_pg, gateway):
    """Two workers: their writers, lease renewals, heartbeats and feeds reconnect; a lease
    runs again from the server's start (no worker could renew it while it was down), every
    task is answered, and every request is a stored attempt. A task sent twice (a worker
    slower to reconnect than its lease) is on record as such."""
    port, cfg = gateway
    db = new_pg_database(own_pg)
    n = 2000
    proc = _start(tmp_path, cfg, db, n, "--workers", "2")
    try:
        wait_until(lambda: _results(db) >= 300, "300 stored results")
        own_pg.crash()
        time.sleep(10)
        own_pg.start_again()
        out, err = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (0, 3), err
    assert "Traceback" not in err and "never retrieved" not in err, err
    summary = json.loads(out)
    assert summary["succeeded"] == n, err
    assert raw_rows(db, "SELECT COUNT(*) FROM attempts")[0][0] == _requests(port)
    twice = raw_rows(db, "SELECT COUNT(*) FROM (SELECT seq FROM attempts GROUP BY seq "
                         "HAVING COUNT(*) > 1) x")[0][0]
    assert summary["sent_twice"] == twice  # every repeat on record, in the report
