"""No key in clear anywhere: swarms run with known key strings, then every place a key
could land is scanned — the database files, exports, reports, listings, --json output,
error output, the events log, and the console's screens."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from swarm_tui.run.wiring import RunOptions
from swarm_tui.run_sources import LiveSource
from swarm_tui.settings.loader import load_config
from swarm_tui.ui.app import SwarmApp
from swarm_tui.ui.keys_panel import KeysScreen
from swarm_tui.workload import demo_tasks
from tests.conftest import swarm
from tests.ui_fixtures import screen_text, wait_for

GOOD_ENV = ["sk-leakcheck-env-AAAA1111bbbb2222cccc3333",
            "sk-leakcheck-env-DDDD4444eeee5555ffff6666"]
GOOD_FILE = "sk-leakcheck-file-GGGG7777hhhh8888iiii9999"
BAD = "sk-leakcheck-revoked-JJJJ0000kkkk1111llll"
ALL = [*GOOD_ENV, GOOD_FILE, BAD]
pytestmark = pytest.mark.timeout(120)


def assert_clean(where: str, text: str | bytes) -> None:
    blob = text if isinstance(text, bytes) else text.encode()
    for key in ALL:
        for needle in (key, key[8:], key[-20:]):  # the key, or a long piece of it
            assert needle.encode() not in blob, f"{where} contains key material"


@pytest.fixture
def setup(sim_factory, tmp_path):
    sim = sim_factory(profile="fixed:30", keys=[*GOOD_ENV, GOOD_FILE])
    kf = tmp_path / "gw.keys"
    kf.write_text(f"{GOOD_FILE} filekey\n")
    kf.chmod(0o600)
    conf = tmp_path / "c.toml"
    conf.write_text(f'[gateways.gw]\nbase_url = "{sim.base_url}"\n'
                    f'key_env = ["LEAK_KEYS"]\nkey_file = "{kf}"\n')
    env = {"LEAK_KEYS": ",".join([*GOOD_ENV, BAD]), "SWARM_TUI_DB": str(tmp_path / "runs.db"),
           "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    return conf, env, tmp_path


@pytest.mark.slow
async def test_no_key_in_any_output_file_or_screen(setup, monkeypatch):
    conf, env, tmp = setup
    outputs: dict[str, str] = {}
    # a rejected key at preflight: disabled with a warning line (fingerprint only), the run
    # goes on with the other keys
    r = swarm("run", "--demo", "5", "--headless", "--config", str(conf), env=env)
    assert r.returncode in (0, 3) and "rejected (401" in r.stderr and "disabled" in r.stderr
    outputs["preflight stderr"] = r.stdout + r.stderr
    # every key rejected: one error line, exit 2
    r = swarm("run", "--demo", "5", "--headless", "--config", str(conf),
              env={**env, "LEAK_KEYS": BAD, "XDG_CONFIG_HOME": str(tmp / "none")})
    outputs["preflight all rejected"] = r.stdout + r.stderr
    # the same key rejected mid-run: disabled with its reason, the run finishes
    r = swarm("run", "--demo", "80", "--headless", "--json", "--no-preflight", "--config",
              str(conf), env=env)
    assert r.returncode in (0, 3), r.stderr
    outputs["run --json"] = r.stdout + r.stderr
    run_id = json.loads(r.stdout)["run_id"]
    for args in (("report", run_id, "--json"), ("report", run_id), ("runs", "--json"),
                 ("export", run_id, "--format", "csv"), ("export", run_id, "--format", "jsonl"),
                 ("keys", "list", "--json"), ("keys", "list")):
        r = swarm(*args, "--config", str(conf), env=env)
        assert r.returncode == 0, (args, r.stderr)
        outputs[" ".join(args)] = r.stdout + r.stderr
    # the key's state went through the store with its reason, by fingerprint
    listed = json.loads(outputs["keys list --json"])
    assert {k["source"] for k in listed} == {"env:LEAK_KEYS", "file"}
    # keys add from stdin: the confirmation names the fingerprint only
    r = subprocess.run([sys.executable, "-m", "swarm_tui", "keys", "add", "--config", str(conf)],
                       input=GOOD_ENV[0] + "\n", capture_output=True, text=True,
                       env={**os.environ, **env}, timeout=60)
    outputs["keys add"] = r.stdout + r.stderr
    # the console: dashboard, keys panel, an agent's detail — on the same keys
    monkeypatch.setenv("LEAK_KEYS", env["LEAK_KEYS"])
    cfg = load_config(str(conf))
    db = tmp / "runs.db"
    source = LiveSource(cfg, RunOptions(concurrency=10, preflight=False), demo_tasks(60), db)
    app = SwarmApp(source, db_target=db, refresh_s=0.1)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(lambda: source.runner is not None and source.runner.counts["succeeded"]
                       > 10, timeout=30)
        await wait_for(lambda: "succeeded" in screen_text(app) or "ok " in screen_text(app))
        outputs["console dashboard"] = screen_text(app)
        await pilot.press("k")
        await wait_for(lambda: isinstance(app.screen, KeysScreen)
                       and "disabled: 401" in screen_text(app))
        outputs["console keys panel"] = screen_text(app)
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, KeysScreen))
        await pilot.press("enter")
        await wait_for(lambda: "task demo-" in screen_text(app))
        outputs["console detail"] = screen_text(app)
        assert "task demo-" in outputs["console detail"]
        await wait_for(lambda: not source.active, timeout=60)
    with pytest.raises(AssertionError):  # the scan does find a key where there is one
        assert_clean("self-check", f"error: {GOOD_FILE[:-3]}…".encode() + GOOD_FILE.encode())
    for where, text in outputs.items():
        assert_clean(where, text)
    files = [f for p in tmp.iterdir() if p.name.startswith("runs.db")
             for f in ([*p.rglob("*")] if p.is_dir() else [p]) if f.is_file()]
    assert files
    for p in files:  # the database, its WAL and shared-memory files, journals, locks
        assert_clean(p.name, p.read_bytes())
    # and the file is really the one with results in it
    import sqlite3

    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM results").fetchone()[0] >= 80
        reasons = [r[0] for r in c.execute("SELECT reason FROM key_state WHERE reason "
                                           "IS NOT NULL")]
    assert reasons and all(r.startswith("401") for r in reasons)
