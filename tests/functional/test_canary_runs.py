"""Canary end to end: real runs through the CLI, two simulated gateways, the stored state."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from swarm_tui.sim.server import SimProcess
from swarm_tui.sim.settings import SimSettings
from swarm_tui.store.target import PgTarget
from tests.conftest import TEST_KEY, assert_one_line_error, new_pg_database, raw_rows, swarm

pytestmark = pytest.mark.timeout(480)


def _config(tmp_path, base, cand, *, mode="auto", bake="0.5s", min_samples=20,
            failure_limit=2, concurrency=140, extra="") -> str:
    path = tmp_path / "canary.toml"
    path.write_text(f"""
concurrency = {concurrency}
[retry]
base_backoff_s = 0.01
max_backoff_s = 0.05
[gateways.direct]
base_url = "{base.base_url}"
key_env = ["SWARM_TEST_KEY"]
[gateways.gw]
base_url = "{cand.base_url}"
key_env = ["SWARM_TEST_KEY"]
[canary]
baseline = "direct"
candidate = "gw"
mode = "{mode}"
bake = {bake if bake.startswith("[") else json.dumps(bake)}
min_samples = {min_samples}
failure_limit = {failure_limit}
interval = "0.2s"
window = "1m"
[canary.gates]
cost_tolerance = 0.25
{extra}
""")
    path.chmod(0o600)  # `extra` may hold a webhook's URL
    return str(path)


@pytest.fixture
def sim_procs():
    """Simulators in their own processes: two in one process share a GIL, and the
    contention shows up as tail latency the profiles do not have."""
    procs: list[SimProcess] = []

    def start(**settings) -> SimProcess:
        settings.setdefault("rate_429", 0.0)
        settings.setdefault("rate_503", 0.0)
        settings.setdefault("seed", 1)
        procs.append(SimProcess(SimSettings(**settings)).start())
        return procs[-1]

    yield start
    for p in procs:
        p.stop()


@pytest.fixture
def env(tmp_path):
    return {"SWARM_TEST_KEY": TEST_KEY, "SWARM_TUI_DB": str(tmp_path / "runs.db"),
            "XDG_CONFIG_HOME": str(tmp_path / "xdg")}


@pytest.fixture
def env_any(tmp_path, db_target):
    """`env` with the canary's state on each back end in turn (the CAS, the audit)."""
    db = db_target.url if isinstance(db_target, PgTarget) else str(db_target)
    return {"SWARM_TEST_KEY": TEST_KEY, "SWARM_TUI_DB": db,
            "XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def _run(cfg: str, env, n: int, *extra: str):
    # the deadline only stops a broken run: a 4,000-task run that takes ~10 s here took
    # over 100 s with both cores held by busy loops beside the suite's other workers
    r = swarm("run", "--demo", str(n), "--model", "deepseek-v3.2", "--headless", "--json",
              "--quiet", "--config", cfg, *extra, env=env, timeout=400)
    assert r.returncode in (0, 3), r.stderr  # 3: the direct baseline breaches the SLA
    return json.loads(r.stdout)


def _status(cfg: str, env) -> dict:
    r = swarm("canary", "status", "--json", "--config", cfg, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _history(cfg: str, env) -> list[dict]:
    r = swarm("canary", "history", "--json", "--config", cfg, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)[::-1]  # oldest first


@pytest.mark.slow
def test_auto_canary_promotes_through_every_stage(sim_procs, tmp_path, env):
    base = sim_procs(profile="direct")
    cand = sim_procs(profile="gateway")
    # each stage needs time to gather 30 candidate samples before its bake runs out
    # failure_limit × interval = 2 s: the first wave's tail (140 streams starting together)
    # must not abort on its own, as 3 × 10 s would not in production
    # a lenient p95 gate: this test is about the stage machinery; on a machine under a CPU
    # hog the simulated gateways themselves slow down (a real latency rise, not the
    # client's), which the latency tests judge elsewhere
    cfg = _config(tmp_path, base, cand, bake='["4s", "2s", "2s", "2s"]', min_samples=30,
                  failure_limit=10, concurrency=100, extra="p95_ms = 3000")
    summary = _run(cfg, env, 6500)
    status = _status(cfg, env)
    moves = [(h["action"], h["from_pct"], h["to_pct"], h["actor"]) for h in _history(cfg, env)]
    # a fine candidate is never aborted. On an overloaded machine (the suite under a CPU
    # hog) a stage can gather too few samples within its seconds-long bake, or the client
    # itself is the bottleneck: auto mode then holds (paused, saying it was inconclusive)
    # rather than act on weak evidence — an honest outcome, checked as such
    assert all(m[0] != "abort" for m in moves), _history(cfg, env)
    if status["state"]["status"] == "paused":
        reason = _history(cfg, env)[-1]["reason"]
        assert reason.startswith("inconclusive after"), reason
        return
    assert (status["state"]["status"], status["state"]["pct"]) == ("complete", 100)
    assert moves[0][0] == "start" and moves[0][2] == 5
    assert moves[1:] == [("promote", 5, 25, "auto"), ("promote", 25, 50, "auto"),
                         ("promote", 50, 100, "auto")]
    promote = _history(cfg, env)[1]
    assert "every gate passed" in promote["reason"]
    assert promote["metrics"]["stage"]["candidate"]["succeeded"] >= 20  # what it was taken on
    # both buckets recorded on the tasks; the candidate took far more than its first 5 %
    buckets = summary["by_bucket"]
    assert set(buckets) == {"baseline", "candidate"}
    assert buckets["candidate"]["total"] > 0.15 * summary["total"]


@pytest.mark.slow
def test_auto_canary_aborts_on_candidate_503s_and_says_why(sim_procs, tmp_path, env):
    base = sim_procs(profile="fixed:150")
    cand = sim_procs(profile="fixed:150", rate_503=0.05)
    # a bake longer than the run: the verdict must come from the failing gate, not from a
    # hold for too few samples (under a CPU hog 40 candidate calls took longer than 4 s);
    # and a latency gate no machine misses: on one slow core the calls' own p95 passed
    # 350 ms and that gate aborted first (a right abort, for another reason than this test's)
    cfg = _config(tmp_path, base, cand, bake="60s", min_samples=40, extra="p95_ms = 60000")
    summary = _run(cfg, env, 4000)
    status = _status(cfg, env)
    assert (status["state"]["status"], status["state"]["pct"]) == ("aborted", 0)
    abort = _history(cfg, env)[-1]
    assert (abort["action"], abort["actor"], abort["source"], abort["to_pct"]) == (
        "abort", "auto", "auto", 0)
    assert "success failed" in abort["reason"] and "2 consecutive" in abort["reason"]
    assert "server" in abort["reason"]  # the error class behind it
    # retries kept the tasks themselves succeeding: the canary judged the calls
    assert summary["failed"] == 0


@pytest.mark.slow
def test_too_little_traffic_stays_inconclusive_pauses_and_never_promotes(sim_factory, tmp_path,
                                                                        env):
    base = sim_factory(profile="fixed:100")
    cand = sim_factory(profile="fixed:100")
    cfg = _config(tmp_path, base, cand, min_samples=100_000, bake="0.5s")
    _run(cfg, env, 300, "--concurrency", "20")
    status = _status(cfg, env)
    assert (status["state"]["status"], status["state"]["pct"]) == ("paused", 5)
    assert status["overall"] == "inconclusive"
    actions = [h["action"] for h in _history(cfg, env)]
    assert actions == ["start", "pause"]
    assert "inconclusive after the 0.5s bake time" in _history(cfg, env)[-1]["reason"]


@pytest.mark.slow
def test_canary_set_from_another_process_reaches_the_running_runner(sim_factory, tmp_path,
                                                                   env):
    base = sim_factory(profile="fixed:100")
    cand = sim_factory(profile="fixed:100")
    cfg = _config(tmp_path, base, cand, mode="manual", bake="24h")
    run = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", "--demo", "600", "--headless", "--quiet",
         "--concurrency", "10", "--config", cfg], env={**os.environ, **env},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    db = env["SWARM_TUI_DB"]
    target = PgTarget(db) if db.startswith("postgresql://") else Path(db)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:  # wait until results are landing
            time.sleep(0.2)
            try:
                if raw_rows(target, "SELECT count(*) FROM results")[0][0] >= 50:
                    break
            except (sqlite3.Error, psycopg.Error):
                continue
        asked_at = time.time()
        r = swarm("canary", "set", "100", "--reason", "move everyone", "--config", cfg, env=env)
        assert r.returncode == 0, r.stderr
        assert "5% progressing → 100% complete" in r.stdout
        set_at = time.time()
        assert run.wait(60) in (0, 3), run.stderr.read() if run.stderr else ""
    finally:
        run.kill()
    before = raw_rows(target, "SELECT gateway, count(*) FROM attempts WHERE sent_at < ? "
                              "GROUP BY gateway", (asked_at,))
    after = raw_rows(target, "SELECT gateway, count(*) FROM attempts WHERE sent_at > ? + 0.6 "
                             "GROUP BY gateway", (set_at,))
    assert dict(before).get("direct", 0) > 0
    after_counts = dict(after)
    assert after_counts.get("gw", 0) > 50 and "direct" not in after_counts, after_counts
    last = _history(cfg, env)[-1]
    assert (last["action"], last["source"], last["reason"]) == ("set", "cli", "move everyone")
    assert last["actor"]  # the OS user


@pytest.mark.slow
def test_canary_cli_refusals_are_one_line(sim_factory, tmp_path, env_any):
    env = env_any
    base = sim_factory(profile="fixed:50")
    cand = sim_factory(profile="fixed:50")
    cfg = _config(tmp_path, base, cand, mode="manual")
    assert_one_line_error(swarm("canary", "resume", "--config", cfg, env=env), 2,
                          "cannot resume while progressing", "allowed: promote")
    assert_one_line_error(swarm("canary", "set", "--config", cfg, env=env), 2,
                          "give the percentage")
    assert_one_line_error(swarm("canary", "set", "150", "--config", cfg, env=env), 2,
                          "outside 1-100")
    assert_one_line_error(swarm("canary", "abort", "--readonly", "--config", cfg, env=env), 2,
                          "--readonly")
    r = swarm("canary", "abort", "--reason", "bad p99", "--config", cfg, env=env)
    assert r.returncode == 0 and "→ 0% aborted" in r.stdout
    assert_one_line_error(swarm("canary", "promote", "--config", cfg, env=env), 2,
                          "cannot promote while aborted", "allowed: retry")
    r = swarm("canary", "status", "--config", cfg, env=env)
    assert r.returncode == 0 and "ABORTED" in r.stdout and "gates (" in r.stdout
    nocfg = tmp_path / "plain.toml"
    nocfg.write_text('[gateways.a]\nbase_url = "http://127.0.0.1:9/v1"\n')
    assert_one_line_error(swarm("canary", "status", "--config", str(nocfg), env=env), 2,
                          "no [canary] section")
    bad = tmp_path / "bad.toml"
    bad.write_text('[gateways.a]\nbase_url = "http://127.0.0.1:9/v1"\n'
                   '[canary]\nbaseline = "a"\ncandidate = "zz"\n')
    assert_one_line_error(swarm("canary", "status", "--config", str(bad), env=env), 2,
                          "canary.candidate: no gateway named 'zz'")


@pytest.mark.slow
def test_canary_demo_on_the_simulator(tmp_path, env):
    r = swarm("run", "--demo", "300", "--canary-demo", "--headless", "--json", "--quiet",
              env=env)
    assert r.returncode in (0, 3), r.stderr
    s = json.loads(r.stdout)
    assert set(s["by_gateway"]) == {"sim", "sim-canary"}
    assert set(s["by_bucket"]) == {"baseline", "candidate"}
    assert 0 < s["by_bucket"]["candidate"]["total"] < 0.15 * 300  # the 5 % stage's users
    status = _status_nocfg(env)
    assert (status["name"], status["mode"], status["state"]["pct"]) == (
        "sim->sim-canary", "auto", 5)
    cfg = tmp_path / "one.toml"
    cfg.write_text('[gateways.a]\nbase_url = "http://127.0.0.1:9/v1"\nkey_env = ["X"]\n')
    assert_one_line_error(swarm("run", "--demo", "5", "--canary-demo", "--headless",
                                "--config", str(cfg), env={**env, "X": "sk-x-0123456789"}),
                          2, "--canary-demo: only on the built-in simulator")


@pytest.mark.slow
def test_the_canary_demo_baseline_takes_the_429s_asked_for(env):
    """Its 429s are off by default (a single key paused for each Retry-After), but a rate
    given on the command line wins there too, as over the demo's scripted incidents."""
    r = swarm("run", "--demo", "200", "--canary-demo", "--headless", "--json", "--quiet",
              "--no-sim-incidents", "--sim-rate-429", "0.2", "--sim-seed", "7", env=env)
    assert r.returncode in (0, 3), r.stderr
    by_gateway = json.loads(r.stdout)["by_gateway"]
    assert by_gateway["sim"]["call_success_rate"] < 0.9, by_gateway["sim"]  # ~0.8 asked


def _status_nocfg(env) -> dict:
    r = swarm("canary", "status", "--json", env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.slow
def test_a_canary_split_across_three_workers_is_one_canary(sim_procs, tmp_path, pg_server,
                                                           receiver):
    """Every worker follows the stored canary and evaluates it; their auto decisions are
    compare-and-swaps, so a failing candidate is aborted once — and paged once — and no
    worker sends to it after the abort. On PostgreSQL, where the workers' transactions
    do run at once (SQLite's one writer serialises them: the same CAS, no race to lose)."""
    env_any = {"SWARM_TEST_KEY": TEST_KEY, "SWARM_TUI_DB": new_pg_database(pg_server).url,
               "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    base = sim_procs(profile="fixed:150")
    cand = sim_procs(profile="fixed:150", rate_503=0.05)
    cfg = _config(tmp_path, base, cand, bake="60s", min_samples=40, extra=f"""
[[alerts.webhooks]]
name = "oncall"
url = "http://127.0.0.1:{receiver.port}/hook"
events = ["canary_abort", "run_finished", "run_interrupted"]
[alerts]
drain_s = 3
""")
    r = swarm("run", "--demo", "4000", "--model", "deepseek-v3.2", "--headless", "--json",
              "--quiet", "--workers", "3", "--config", cfg, env=env_any, timeout=400)
    assert r.returncode in (0, 3), r.stderr
    summary = json.loads(r.stdout)
    assert summary["status"] == "finished" and summary["succeeded"] == 4000
    status = _status(cfg, env_any)
    assert (status["state"]["status"], status["state"]["pct"]) == ("aborted", 0)
    moves = [(h["action"], h["actor"]) for h in _history(cfg, env_any)]
    # once, not once per worker
    # auto, and on the server the role it ran as (written by the audited function)
    assert [m[0] for m in moves] == ["start", "abort"] and moves[1][1].startswith("auto"), moves
    kinds = [a["kind"] for a in receiver.json()]
    assert sorted(kinds) == ["canary_abort", "run_finished"], kinds
    db = env_any["SWARM_TUI_DB"]
    target = PgTarget(db) if db.startswith("postgresql://") else Path(db)
    assert raw_rows(target, "SELECT COUNT(DISTINCT worker) FROM batches")[0][0] == 3
    aborted_at = raw_rows(target, "SELECT MAX(at) FROM canary_actions")[0][0]
    # no worker sends a task's first call to the candidate after it saw the abort (a retry
    # of a call the candidate failed before may still go there: a task keeps its gateway
    # once sent). When each worker saw it is its own signed log line, on the clock of its
    # attempts; how soon after the abort that was depends on the machine, not asserted.
    seen = dict(raw_rows(target, "SELECT actor, MIN(at) FROM events WHERE kind = 'control' "
                                 "AND detail_json LIKE '%(aborted)%' GROUP BY actor"))
    for worker, ended in raw_rows(target, "SELECT worker, ended_at FROM workers"):
        late = raw_rows(target, "SELECT COUNT(*) FROM attempts a JOIN batches b ON "
                                "b.run_id = a.run_id AND a.seq BETWEEN b.first_seq AND "
                                "b.last_seq WHERE b.worker = ? AND a.gateway = 'gw' AND "
                                "a.number = 1 AND a.sent_at > ?",
                        (worker, seen.get(worker, ended)))[0][0]
        assert late == 0, (worker, seen, aborted_at)
        # a worker that never logged the abort had ended before it
        assert worker in seen or ended <= aborted_at, (worker, seen, aborted_at)
    # and before it, the candidate had its share from the split run's routing
    assert raw_rows(target, "SELECT COUNT(*) FROM attempts WHERE gateway='gw'")[0][0] >= 40


@pytest.mark.slow
def test_a_resumed_canary_run_splits_by_the_canary_not_its_baseline(sim_factory, tmp_path,
                                                                   env):
    base = sim_factory(profile="fixed:20")
    cand = sim_factory(profile="fixed:20")
    cfg = _config(tmp_path, base, cand, mode="manual", bake="24h")
    r = swarm("run", "--demo", "200", "--model", "deepseek-v3.2", "--headless", "--json",
              "--quiet", "--budget", "0.0005", "--concurrency", "10", "--config", cfg,
              env=env)
    assert r.returncode == 4, r.stderr  # stopped at the cap, the rest unsent
    run_id = json.loads(r.stdout)["run_id"]
    assert swarm("canary", "set", "100", "--config", cfg, env=env).returncode == 0
    resumed_at = time.time()
    r = swarm("resume", run_id, "--budget", "5", "--json", "--quiet", "--config", cfg,
              env=env)
    assert r.returncode in (0, 3), r.stderr
    assert json.loads(r.stdout)["succeeded"] == 200
    after = dict(raw_rows(Path(env["SWARM_TUI_DB"]), "SELECT gateway, COUNT(*) FROM attempts "
                                                     "WHERE sent_at > ? GROUP BY gateway",
                          (resumed_at,)))
    assert after.get("gw", 0) > 0 and "direct" not in after, after  # the canary's 100 %


@pytest.mark.slow
def test_canary_status_elsewhere_judges_the_stage_with_the_executors_loop_lag(
        sim_factory, tmp_path, env):
    """`canary status` in another process judges the same stored stage with the loop lag
    the executing run measured (its heartbeat carries it), so a difference the client's
    delay can explain is inconclusive there too — not pass/fail where the run and
    /metrics say inconclusive — and a 2x slower candidate fails when the lag is small."""
    # 3x slower: a loaded machine inflates the stored p95s (the baseline's by more, in
    # proportion) — with 2x the measured ratio came to 1.50 once, on the limit
    base = sim_factory(profile="fixed:100")
    cand = sim_factory(profile="fixed:300")
    cfg = _config(tmp_path, base, cand, mode="manual", bake="24h", extra="max_p95_ratio = 1.5")
    assert swarm("canary", "set", "50", "--config", cfg, env=env).returncode == 0
    run = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", "--demo", "300", "--headless", "--quiet",
         "--concurrency", "20", "--rate", "60", "--model", "deepseek-v3.2", "--config", cfg],
        env={**os.environ, **env}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    db = Path(env["SWARM_TUI_DB"])
    published: list[float] = []
    try:
        deadline = time.time() + 60
        while not published and run.poll() is None and time.time() < deadline:
            time.sleep(0.2)
            try:
                rows = raw_rows(db, "SELECT live_json FROM runs WHERE status='running'")
            except sqlite3.Error:
                continue
            published = [json.loads(r[0])["canary_lag_ms"] for r in rows
                         if r[0] and json.loads(r[0]).get("canary_lag_ms") is not None]
        assert run.wait(90) in (0, 3), run.stderr.read() if run.stderr else ""
    finally:
        run.kill()
    assert published, "the executor's heartbeat never carried the lag its canary judged with"

    def judged_with(lag_ms: float | None) -> dict:
        # the executor as its heartbeat shows it, still running on another host with that
        # lag (the stored stage is the run's: its rows are all in)
        with sqlite3.connect(db) as c:
            c.execute("UPDATE runs SET status='running', host='executor-host', "
                      "heartbeat_at=?, live_json=?",
                      (time.time(), json.dumps({"canary_lag_ms": lag_ms})))
        try:
            return _status(cfg, env)
        finally:
            with sqlite3.connect(db) as c:
                c.execute("UPDATE runs SET status='succeeded', live_json=NULL")

    ratio = {name: next(v for v in judged_with(lag)["analysis"]["verdicts"]
                    if v["gate"] == "p95-ratio")
             for name, lag in (("loaded", 250.0), ("quiet", 1.0))}
    out = judged_with(250.0)
    assert out["executor_lag_ms"] == 250.0
    # ~200 ms slower: 250 ms of client delay could explain it; 1 ms cannot
    assert ratio["loaded"]["result"] == "inconclusive", ratio
    assert ratio["quiet"]["result"] == "fail", ratio
    assert _status(cfg, env)["executor_lag_ms"] is None  # no executor running: none


async def test_stopping_the_canary_lets_an_evaluation_under_way_land_first(tmp_path,
                                                                          monkeypatch):
    """Seen on one loaded core: the run ended while the canary's evaluation was saving an
    abort; the abort was paged after the run's alerts had closed. A run's end now stops
    the canary first, and stopping waits for that evaluation: its move reaches the
    listeners (the alerts) before stop returns."""
    import asyncio

    from swarm_tui.canary import controller as canary_controller
    from swarm_tui.engine.routing import CanaryRouter
    from swarm_tui.settings.sections import CanaryConfig

    monkeypatch.setattr(canary_controller, "POLL_S", 3600.0)
    cfg = CanaryConfig(baseline="b", candidate="c", interval=3600.0)
    db = tmp_path / "runs.db"
    ctl = canary_controller.CanaryController(cfg, CanaryRouter("b", "c"), db)
    await ctl.open()
    moves: list[int] = []
    ctl.listeners.append(lambda _old, new: moves.append(new.pct))
    try:
        ctl.start()
        async with ctl._lock:  # an evaluation under way: it holds the controller's lock
            stopping = asyncio.create_task(ctl.stop())
            await canary_controller.act_stored(db, cfg, "abort", None, "5xx", "auto")
            await ctl.poll()  # the evaluation follows the move it saved
            assert not stopping.done()  # it needs the lock this evaluation holds
        await stopping
        assert moves == [0] and ctl._task is None
    finally:
        await ctl.close()
