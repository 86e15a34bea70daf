"""Cost: to the cent from stored tokens and the price table, streamed or not, cached or not;
unpriced is never $0; what-if and routing what-if; the budget stop keeps unsent tasks."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import tomllib
from pathlib import Path

import pytest

from swarm_tui.core.plain import as_plain
from swarm_tui.engine.cost import cost_report
from swarm_tui.prices import load_price_table
from tests.conftest import swarm

PRICES = tomllib.loads((Path(__file__).parent.parent.parent / "swarm_tui/data/prices.toml")
                       .read_text())["models"]
pytestmark = pytest.mark.timeout(120)


def hand_cost(model: str, tokens_in: int, tokens_out: int, cached: int) -> float:
    """The bill by hand: fresh input, cached input and output at their own rates."""
    p = PRICES[model]
    cached_rate = p.get("cached_input", p["input"])
    return ((tokens_in - cached) * p["input"] + cached * cached_rate
            + tokens_out * p["output"]) / 1_000_000


@pytest.fixture
def cfg_for(tmp_path):
    def make(sim) -> tuple[str, dict]:
        conf = tmp_path / "c.toml"
        conf.write_text(f'[gateways.gw]\nbase_url = "{sim.base_url}"\nkey_env = ["K"]\n')
        return str(conf), {"K": "sk-cost-test-0123456789abcdef",
                           "SWARM_TUI_DB": str(tmp_path / "runs.db")}
    return make


@pytest.mark.parametrize(("stream", "cached", "style"), [
    (True, 0.0, "openai"), (False, 0.0, "openai"), (True, 0.5, "openai"),
    (False, 0.5, "openai"), (True, 0.4, "deepseek"), (False, 0.4, "deepseek"),
])
@pytest.mark.slow
def test_cost_equals_the_hand_computation_to_the_cent(sim_factory, cfg_for, tmp_path, stream,
                                                      cached, style):
    sim = sim_factory(profile="fixed:20", cached_fraction=cached, usage_style=style)
    conf, env = cfg_for(sim)
    flags = [] if stream else ["--no-stream"]
    r = swarm("run", "--demo", "60", "--headless", "--json", "--quiet", "--config", conf,
              *flags, env=env)
    assert r.returncode in (0, 3), r.stderr
    summary = json.loads(r.stdout)
    with sqlite3.connect(env["SWARM_TUI_DB"]) as c:
        rows = c.execute("SELECT model, tokens_in, tokens_out, cached_in, cost_usd, "
                         "usage_estimated FROM results WHERE state='succeeded'").fetchall()
    assert len(rows) == 60 and not any(r[5] for r in rows)  # usage reported, not estimated
    if cached:  # the gateway's cache hits were recorded and billed at the cached rate
        assert all(r[3] == int(r[1] * cached) and r[3] > 0 for r in rows)
    else:
        assert all(r[3] == 0 for r in rows)
    by_hand = sum(hand_cost(m, i, o, k) for m, i, o, k, _, _ in rows)
    assert round(summary["cost_usd"], 2) == round(by_hand, 2)
    assert summary["cost_usd"] == pytest.approx(by_hand, abs=1e-9)
    for model, stats in summary["by_model"].items():
        assert stats["cost_usd"] == pytest.approx(
            sum(hand_cost(m, i, o, k) for m, i, o, k, _, _ in rows if m == model), abs=1e-9)
    if cached:  # priced as fresh input it would have cost more
        fresh = sum(hand_cost(m, i, o, 0) for m, i, o, _k, _, _ in rows)
        assert fresh > by_hand
    rc = swarm("cost", summary["run_id"], "--json", env=env)
    assert rc.returncode == 0, rc.stderr
    report = json.loads(rc.stdout)
    assert report["total"]["cost_usd"] == pytest.approx(by_hand, abs=1e-9)
    for w in report["what_if"]:  # the same tokens on every model, by hand
        assert w["cost_usd"] == pytest.approx(
            sum(hand_cost(w["model"], i, o, k) for _m, i, o, k, _, _ in rows), abs=1e-9)
    routing = report["routing"]
    assert routing["all_long_usd"] == pytest.approx(
        sum(hand_cost("kimi-k2.5", i, o, k) for _m, i, o, k, _, _ in rows), abs=1e-9)
    assert routing["saving_pct"] > 0  # short tasks on the cheaper model


@pytest.mark.slow
def test_unpriced_model_is_never_zero(sim_factory, cfg_for):
    sim = sim_factory(profile="fixed:20")
    conf, env = cfg_for(sim)
    r = swarm("run", "--demo", "20", "--headless", "--json", "--quiet", "--model",
              "house-llm-7b", "--config", conf, env=env)
    summary = json.loads(r.stdout)
    assert summary["unpriced_tasks"] == 20 and summary["unpriced_models"] == ["house-llm-7b"]
    assert summary["cost_per_task_usd"] is None
    assert summary["by_model"]["house-llm-7b"]["cost_per_task_usd"] is None
    text = swarm("run", "--demo", "5", "--headless", "--quiet", "--model", "house-llm-7b",
                 "--config", conf, env=env).stdout
    assert "unpriced (house-llm-7b: 5 tasks)" in text
    with sqlite3.connect(env["SWARM_TUI_DB"]) as c:  # NULL in the store, not 0.0
        assert c.execute("SELECT count(*) FROM results WHERE cost_usd IS NULL").fetchone()[0] \
            == 25
    rc = swarm("cost", summary["run_id"], env=env)
    assert "20 tasks on unpriced models (not $0: unknown)" in rc.stdout
    report = json.loads(swarm("cost", summary["run_id"], "--json", env=env).stdout)
    assert report["projection"]["month_at_volume_usd"] is None
    # no rate and no projection from an all-unpriced run: null plus a count, never $0
    proj = report["projection"]
    assert proj["usd_per_min"] is None and proj["month_at_rate_usd"] is None
    assert proj["unpriced_tasks"] == 20
    assert "rate  unpriced: 20 tasks" in rc.stdout and "$0.00/day" not in rc.stdout
    assert all(w["vs_actual"] is None for w in report["what_if"])
    # the headless per-model line says unpriced, not $0.0000
    assert "house-llm-7b: 5/5 ok" in text and "unpriced" in text.split("house-llm-7b: 5/5")[1]


@pytest.mark.slow
def test_budget_stop_stops_dispatch_and_keeps_unsent_tasks(sim_factory, cfg_for):
    sim = sim_factory(profile="fixed:100")
    conf, env = cfg_for(sim)
    r = swarm("run", "--demo", "300", "--headless", "--json", "--quiet", "--budget", "0.03",
              "--config", conf, env=env)
    assert r.returncode == 4, r.stderr
    assert "stopped at the budget cap" in r.stderr and "resume" in r.stderr
    s = json.loads(r.stdout)
    assert s["status"] == "budget_stopped"
    assert 0 < s["cost_usd"] <= 0.03           # never over the cap
    assert s["succeeded"] + s["failed"] < 300 and s["unfinished"] > 0
    assert s["cancelled"] == 0                  # in-flight calls finished, nothing dropped
    db = env["SWARM_TUI_DB"]
    with sqlite3.connect(db) as c:
        unsent = c.execute("SELECT count(*) FROM task_results WHERE run_id=? AND "
                           "state='queued'", (s["run_id"],)).fetchone()[0]
        events = [d for (d,) in c.execute("SELECT detail_json FROM events WHERE kind='control'")]
    assert unsent == s["unfinished"]
    assert any(d.startswith("budget: 80% reached") for d in events)
    assert any(d.startswith("budget cap $0.0300 reached") for d in events)
    # resuming under the same cap sends (almost) nothing: what the run already cost counts
    r_same = swarm("resume", s["run_id"], "--json", "--quiet", "--config", conf, env=env)
    assert r_same.returncode == 4, r_same.stderr
    assert json.loads(r_same.stdout)["cost_usd"] <= 0.03
    # the unsent tasks are resumable; a higher cap finishes the run, each task once
    r2 = swarm("resume", s["run_id"], "--budget", "5", "--json", "--quiet", "--config", conf,
               env=env)
    assert r2.returncode in (0, 3), r2.stderr
    s2 = json.loads(r2.stdout)
    assert (s2["status"], s2["succeeded"], s2["total"]) == ("finished", 300, 300)
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM results WHERE run_id=?",
                         (s["run_id"],)).fetchone()[0] == 300
    # a cap below one call's estimate sends nothing at all
    r3 = swarm("run", "--demo", "50", "--headless", "--json", "--quiet", "--budget", "0.00001",
               "--config", conf, env=env)
    assert r3.returncode == 4 and json.loads(r3.stdout)["succeeded"] == 0


def test_bad_budget_is_one_line(sim_factory, cfg_for):
    from tests.conftest import assert_one_line_error

    sim = sim_factory(profile="fixed:20")
    conf, env = cfg_for(sim)
    assert_one_line_error(swarm("run", "--demo", "5", "--budget", "-1", "--headless",
                                "--config", conf, env=env), 2, "--budget")


def test_cost_report_projection_and_timeline():
    from tests.ui_fixtures import CostRow as Row

    prices = load_price_table(None, {}, "test")
    rows = [Row("succeeded", "deepseek-v3.2", cost_usd=0.0007)] * 3 + \
        [Row("succeeded", "kimi-k2.5", cost_usd=0.00265, usage_estimated=True),
         Row("failed", "kimi-k2.5")]
    rep = cost_report(rows, prices, run_id="r", wall_s=60.0, tasks_per_day=12_000,
                      long_model="kimi-k2.5", finished_s=[10.0, 20.0, 30.0, 59.0, 59.0],
                      steps=6)
    assert rep.total.tasks == 4 and rep.total.cost_usd == pytest.approx(0.00475)
    assert rep.estimated and rep.total.estimated_tasks == 1
    assert rep.projection.usd_per_min == pytest.approx(0.00475)
    assert rep.projection.month_at_rate_usd == pytest.approx(0.00475 * 1440 * 30)
    assert rep.projection.month_at_volume_usd == pytest.approx(0.00475 / 4 * 12_000 * 30)
    assert rep.timeline == pytest.approx([0.0, 0.0007, 0.0014, 0.0021, 0.0021, 0.00475])
    assert set(rep.by_model) == {"deepseek-v3.2", "kimi-k2.5"}
    assert rep.by_key["sk-…abcd#000000"].tasks == 4


async def test_a_budget_stop_does_not_wait_out_retry_backoffs(sim_factory):
    """Stopped for good, a retry still waiting out a long backoff will never be sent: the
    run ends when the calls in flight do, and that task stays unsent (resumable)."""
    import asyncio

    from swarm_tui.settings.run_sections import RetryConfig
    from tests.conftest import client_for, make_runner, tasks

    server = sim_factory(profile="fixed:30", rate_503=0.4)
    slow_retries = RetryConfig(base_backoff_s=60.0, max_backoff_s=120.0, max_attempts=5)
    async with client_for(server) as gw:
        probe = make_runner(gw, tasks(60), concurrency=4, retry=slow_retries)
        one_call = probe.call_estimate_usd(probe.records[0])
        assert one_call
        runner = make_runner(gw, tasks(60), concurrency=4, retry=slow_retries)
        runner.policy = dataclasses.replace(runner.policy, budget_usd=one_call * 12)
        await asyncio.wait_for(runner.run(), 50)  # not the 60-120 s of a backoff
    assert runner.stop_reason == "budget_stopped"
    assert runner.retry_waiting == 0
    states = {a.state for a in runner.records}
    assert "retrying" not in states and "queued" in states
    assert any(a.attempts and a.state == "queued" for a in runner.records)  # a dropped retry


@pytest.mark.slow
def test_the_stored_cost_summed_by_the_database_equals_the_per_task_report(tmp_path):
    """`cost` reads a stored run's succeeded tasks summed per breakdown and timeline step
    (store/cost_rows.py); every figure equals the report built task by task."""
    import asyncio

    from swarm_tui.report.cost import TIMELINE_STEPS, stored_cost
    from swarm_tui.settings.loader import load_config
    from swarm_tui.settings.view import ConfigView
    from swarm_tui.store.db import open_db
    from swarm_tui.store.runs import get_run, task_rows

    env = {"SWARM_TUI_DB": str(tmp_path / "runs.db"), "XDG_CONFIG_HOME": str(tmp_path / "x")}
    r = swarm("run", "--demo", "400", "--headless", "--json", "--quiet", "--sim-profile",
              "fixed:20", "--sim-rate-503", "0.05", "--sim-rate-429", "0", env=env)
    run_id = json.loads(r.stdout)["run_id"]
    # a second key and some estimated usage, so those breakdowns have more than one group
    with sqlite3.connect(env["SWARM_TUI_DB"]) as c:
        c.execute("UPDATE results SET key_fp = 'sk-…zz#1', usage_estimated = 1 "
                  "WHERE seq % 7 = 0")
        # (rows rewritten after the run's end, as no executor does: the breakdown kept
        # at its end no longer holds — store/cost_index.py — so it is summed here)
        c.execute("DELETE FROM cost_index")
    cfg = load_config(None)

    async def both():
        conn = await open_db(Path(env["SWARM_TUI_DB"]), create=False)
        try:
            run = await get_run(conn, run_id, Path(env["SWARM_TUI_DB"]))
            rows = [r async for chunk in task_rows(conn, run_id) for r in chunk]
            per_task = cost_report(
                rows, cfg.prices, run_id=run.id, wall_s=run.wall_ms / 1000.0,
                tasks_per_day=cfg.settings.tasks_per_day, long_model="kimi-k2.5",
                finished_s=[(x.finished_at - run.started_at) if x.finished_at else None
                            for x in rows], steps=TIMELINE_STEPS)
            return per_task, await stored_cost(conn, run, ConfigView.of(cfg))
        finally:
            await conn.close()

    per_task, summed = asyncio.run(both())
    a, b = as_plain(per_task), as_plain(summed)
    assert a["total"]["tasks"] > 300 and len(a["by_key"]) == 2
    assert a["total"]["estimated_tasks"] > 0
    assert _approx_equal(a, b)
    # the sums come from the covering index, never from the answers' overflow pages
    from swarm_tui.store.cost_rows import cost_groups_sql
    with sqlite3.connect(env["SWARM_TUI_DB"]) as c:
        plan = " ".join(str(row[-1]) for row in c.execute(
            "EXPLAIN QUERY PLAN " + cost_groups_sql(1.0), (29, 0.0, 1.0, 30, run_id, "x")))
    assert "COVERING INDEX results_cost" in plan, plan


def _approx_equal(a, b, path: str = "") -> bool:
    """Deep equality with floats to 1e-9 relative (the database sums in another order)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        return all(_approx_equal(a[k], b[k], f"{path}.{k}") for k in a)
    if isinstance(a, list):
        assert len(a) == len(b), path
        return all(_approx_equal(x, y, f"{path}[{i}]")
                   for i, (x, y) in enumerate(zip(a, b, strict=True)))
    if isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12), path
        return True
    assert a == b, path
    return True
