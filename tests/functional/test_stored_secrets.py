"""Credentials other than API keys — a webhook URL, a gateway's user:password@, a database
password — stay where only the operator can read them: never in the database (any table,
as any role), never on any process's command line, never in an error line."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2
import pytest

from swarm_tui.store.schema import MIGRATIONS
from tests.conftest import (
    TEST_KEY,
    assert_one_line_error,
    free_port,
    new_pg_database,
    pg_login,
    raw_rows,
    sim_gateway,
    swarm,
    wait_until,
)

HOOK_SECRET = "T0HOOK/B0SECRET/xoxb-hook-credential-123"
GW_PASSWORD = "gw-basic-auth-pw-456"
DB_PASSWORD = "db-password-789-secret"


@pytest.fixture
def gateway(tmp_path):
    yield from sim_gateway(tmp_path, "fixed:20")


def _config(tmp_path: Path, port: int, receiver_port: int) -> Path:
    cfg = tmp_path / "secrets.toml"
    cfg.write_text(f'[gateways.local]\nbase_url = "http://127.0.0.1:{port}/v1"'
                   '\nkey_env = ["GW_KEY"]\n'
                   f'[[alerts.webhooks]]\nname = "oncall"\n'
                   f'url = "http://127.0.0.1:{receiver_port}/{HOOK_SECRET}"\n'
                   'events = ["run_finished"]\n')
    cfg.chmod(0o600)  # it holds a webhook's URL
    return cfg


@pytest.mark.slow
def test_a_gateway_url_with_a_password_is_refused_in_one_line(tmp_path, no_user_config):
    """user:password@ in base_url would be stored and shown with it — and cannot be sent
    with the key's Bearer header (every call failed `protocol`)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[gateways.g]\nbase_url = "https://ops:{GW_PASSWORD}@gw.example/v1"\n'
                   'key_env = ["GW_KEY"]\n')
    r = swarm("run", "--demo", "3", "--headless", "--config", str(cfg))
    assert_one_line_error(r, 2, "gateways.g.base_url", "user:password@")
    _assert_no_secret("the refusal", r.stderr)


@pytest.mark.slow
def test_a_config_that_holds_a_webhook_secret_is_its_owners_alone(tmp_path, gateway, receiver,
                                                                  no_user_config):
    """A webhook URL or PagerDuty key written in the config file: a run refuses to send
    with it while every user of the bastion can read the file (as a key file), and names
    the secret by its webhook, never its value. Reading commands still read the runs."""
    port, _cfg = gateway
    cfg = _config(tmp_path, port, receiver.port)
    env = {"GW_KEY": TEST_KEY}
    r = swarm("run", "--demo", "3", "--headless", "--config", str(cfg), env=env)
    assert r.returncode in (0, 3), r.stderr  # 0600: as _config leaves it
    for mode in (0o644, 0o640):
        cfg.chmod(mode)
        r = swarm("run", "--demo", "3", "--headless", "--config", str(cfg), env=env)
        assert_one_line_error(r, 2, f"config {cfg}: holds a secret (webhook 'oncall' url)",
                              f"(mode {mode:o}); chmod 600 it", "url_env")
        _assert_no_secret("the refusal", r.stderr)
        r = swarm("runs", "--config", str(cfg))
        assert r.returncode == 0 and "finished" in r.stdout, r.stderr


def _assert_no_secret(where: str, blob: bytes | str) -> None:
    data = blob.encode() if isinstance(blob, str) else blob
    for secret in (HOOK_SECRET, GW_PASSWORD, DB_PASSWORD):
        assert secret.encode() not in data, f"{where} holds {secret[:6]}…"


@pytest.mark.slow
def test_no_credential_in_the_sqlite_file_or_any_output(tmp_path, gateway, receiver,
                                                         no_user_config):
    port, _ = gateway
    cfg = _config(tmp_path, port, receiver.port)
    env = {"GW_KEY": TEST_KEY}
    metrics_port = free_port()
    scraped: list[str] = []

    def scrape() -> None:  # /metrics while the run lingers after its end
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not scraped:
            try:
                scraped.append(httpx2.get(f"http://127.0.0.1:{metrics_port}/metrics",
                                          timeout=2).text)
            except httpx2.HTTPError:
                time.sleep(0.1)

    scraper = threading.Thread(target=scrape)
    scraper.start()
    r = swarm("run", "--demo", "20", "--headless", "--json", "--config", str(cfg),
              "--metrics-port", str(metrics_port), "--metrics-linger", "3", env=env)
    scraper.join()
    assert r.returncode in (0, 3), r.stderr
    assert scraped and "swarm_tui_calls" in scraped[0]
    _assert_no_secret("/metrics", scraped[0])
    assert [a["kind"] for a in receiver.json(f"/{HOOK_SECRET}")] == ["run_finished"]  # used
    run_id = json.loads(r.stdout)["run_id"]
    outputs = r.stdout + r.stderr
    for args in (("report", run_id, "--json"), ("runs", "--json"),
                 ("export", run_id, "--format", "jsonl"), ("cost", run_id, "--json")):
        out = swarm(*args, "--config", str(cfg), env=env)
        outputs += out.stdout + out.stderr
    _assert_no_secret("the commands' output", outputs)
    db = Path(os.environ["SWARM_TUI_DB"])
    for f in db.parent.glob(db.name + "*"):
        if f.is_file():
            _assert_no_secret(f.name, f.read_bytes())
    stored = json.loads(raw_rows(db, "SELECT config_json FROM runs")[0][0])
    hook = stored["settings"]["alerts"]["webhooks"][0]
    assert hook["name"] == "oncall" and hook["url"].startswith("<secret sha256:")
    assert port  # the gateway it ran on


def test_a_database_stored_before_is_scrubbed_by_its_migration(tmp_path):
    """Runs stored by an older swarm-tui kept the webhook URL and base_url userinfo."""
    db = tmp_path / "old.db"
    raw = sqlite3.connect(db)
    for script in MIGRATIONS[:10]:
        raw.executescript(script)
    raw.execute("PRAGMA user_version = 10")
    config = {"settings": {"alerts": {"webhooks": [{"name": "oncall", "url":
                                                    f"https://hooks.example/{HOOK_SECRET}"}]},
                           "gateways": {"g": {"base_url":
                                              f"https://u:{GW_PASSWORD}@gw.example/v1"}}},
              "gateways": {"g": {"base_url": f"https://u:{GW_PASSWORD}@gw.example/v1"}}}
    raw.execute("INSERT INTO runs (id, status, simulated, started_at, heartbeat_at, wall_ms, "
                "total, workload_hash, config_json) VALUES ('r1', 'finished', 0, 1, 1, 0, 0, "
                "'h', ?)", (json.dumps(config),))
    raw.commit()
    raw.close()
    db.chmod(0o600)
    r = swarm("runs", "--json", env={"SWARM_TUI_DB": str(db)})
    assert r.returncode == 0, r.stderr
    with sqlite3.connect(db) as c:
        c.execute("VACUUM")  # the old text must not survive in a free page either
    _assert_no_secret("the migrated file", db.read_bytes())
    stored = json.loads(raw_rows(db, "SELECT config_json FROM runs")[0][0])
    assert stored["gateways"]["g"]["base_url"] == "https://***@gw.example/v1"


@pytest.mark.slow
def test_a_password_in_a_url_never_reaches_argv_or_an_error_line(tmp_path, gateway,
                                                                  pg_server, no_user_config):
    """`password=` as a URL parameter is a password too: refused on the command line and
    masked in every line; workers started by `run --workers` inherit the URL through their
    environment — read from /proc/PID/cmdline of the starter and every worker."""
    _port, cfg = gateway
    target = new_pg_database(pg_server)
    url = f"{target.url}?password={DB_PASSWORD}&application_name=x"
    r = swarm("runs", "--db", url)
    assert_one_line_error(r, 2, "password=***", "visible to every user")
    _assert_no_secret("the refusal", r.stderr)
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"id": f"t{i}", "prompt": "p", "max_tokens": 8}) + "\n"
                         for i in range(3000)))
    env = {**os.environ, "GW_KEY": TEST_KEY, "SWARM_TUI_DB": url}
    starter = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", str(w), "--config", str(cfg), "--workers",
         "2", "--headless", "--quiet", "--concurrency", "20"], env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: _workers(target) == 2, "two workers", 60)
        pids = [starter.pid] + [p for (p,) in raw_rows(target, "SELECT pid FROM workers")]
        for pid in pids:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            _assert_no_secret(f"argv of {pid}", argv)
            assert b"swarm_tui" in argv  # the process read is ours
    finally:
        starter.terminate()
        _, err = starter.communicate(timeout=60)
    _assert_no_secret("the starter's stderr", err)


def _workers(target) -> int:
    try:
        return raw_rows(target, "SELECT COUNT(*) FROM workers")[0][0]
    except Exception as e:  # the table is made by the starter; any other error is real
        if "workers" in str(e) and "exist" in str(e):
            return 0
        raise


@pytest.mark.slow
def test_the_reader_role_can_select_no_secret(tmp_path, gateway, receiver, pg_server):
    port, _ = gateway
    target = new_pg_database(pg_server)
    cfg = _config(tmp_path, port, receiver.port)
    env = {"GW_KEY": TEST_KEY, "SWARM_TUI_DB": target.url, "XDG_CONFIG_HOME": str(tmp_path)}
    r = swarm("run", "--demo", "10", "--headless", "--config", str(cfg), env=env)
    assert r.returncode in (0, 3), r.stderr
    deadline = time.monotonic() + 5
    while not receiver.posts and time.monotonic() < deadline:
        time.sleep(0.05)
    # as the reader role reads it (every table is granted to it): nothing secret
    assert swarm("--db", target.url, "db", "init", "--roles").returncode == 0
    reader = pg_login(pg_server, target, "peeker")
    tables = [t for (t,) in raw_rows(reader, "SELECT tablename FROM pg_tables WHERE "
                                             "schemaname = 'public'")]
    assert {"runs", "events", "canary_actions", "control"} <= set(tables)
    for table in tables:
        rows = raw_rows(reader, f"SELECT * FROM {table}")
        _assert_no_secret(f"table {table}, as the reader", repr(rows))
