"""A budget cap shared by a run's workers (issue 17), on SQLite and PostgreSQL: draws on
the cap never pass it, however many workers draw at once; a worker silent past its lease
gives back what it did not spend, and is fenced out; `run --workers 2 --budget` stops at
the cap across both workers, with each result counted in the ledger once, resumable."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from swarm_tui.prices import PriceTable, shipped_prices
from swarm_tui.store.budget_ledger import draw_budget, run_spend
from swarm_tui.store.claims import take_lock
from swarm_tui.store.db import open_db
from swarm_tui.store.fences import RESULT_COST, LeaseFence, LostClaim
from swarm_tui.store.leases import join_run, split_run
from swarm_tui.store.runs import create_run
from swarm_tui.store.writer import RESULT_COLS
from swarm_tui.workload import Task
from tests.conftest import TEST_KEY, make_client, make_runner, raw_rows, tasks
from tests.functional.test_workers import _count, _run, _served, _workload


def test_the_fence_reads_a_results_cost_where_the_writer_puts_it():
    assert RESULT_COLS.split(", ")[RESULT_COST] == "cost_usd"


async def test_draws_on_a_shared_cap_never_pass_it_and_a_silent_worker_gives_back(
        sim_factory, db_target):
    conn = await open_db(db_target)
    gw = make_client(sim_factory(profile="fixed:30"))
    work = tasks(10, prefix="b")
    claim = take_lock(db_target, "b")
    drawers = [await open_db(db_target, create=False, reconcile=False) for _ in range(6)]
    try:
        await create_run(conn, "b", make_runner(gw, work).records, work, name=None,
                         simulated=True, config={"budget_usd": 1.0}, claim=claim)
        await split_run(conn, "b", 10)
        for i in range(6):
            await join_run(conn, "b", f"w{i}", f"token{i}", "host", i)

        async def draw_all(i: int) -> float:
            got = 0.0
            while True:  # one call is 0.01; each asks for five at a time
                d = await draw_budget(drawers[i], "b", f"w{i}", 1.0, need=0.01, want=0.05,
                                      dead_after_s=60)
                if not d.granted:
                    return got
                assert d.granted >= 0.01
                got += d.granted

        # the first draw: its fair share of the whole cap among six, though it asked more
        first = await draw_budget(drawers[0], "b", "w0", 1.0, need=0.01, want=0.5,
                                  dead_after_s=60)
        assert first.granted == pytest.approx(1.0 / 6) and first.workers == 6
        got = await asyncio.gather(*(draw_all(i) for i in range(6)))
        got[0] += first.granted
        committed, spent = await run_spend(conn, "b")
        assert sum(got) <= 1.0 + 1e-9 and committed == pytest.approx(sum(got))
        assert sum(got) > 1.0 - 0.01  # what is left is less than one call
        assert spent == 0.0
        # w0 falls silent having spent 0.02 of what it drew: the next draw ends it, its
        # unspent allowance comes back, and its next flush finds itself fenced out
        raw_rows(db_target, "UPDATE workers SET heartbeat_at = heartbeat_at - 120, "
                            "spent_usd = 0.02 WHERE worker='w0'")
        d = await draw_budget(drawers[1], "b", "w1", 1.0, need=0.01, want=1.0,
                              dead_after_s=60)
        before = sum(got) - got[0] + 0.02  # w0 counts as what it spent
        assert d.workers == 5 and d.granted == pytest.approx((1.0 - before) / 5)  # fair share
        assert (await run_spend(conn, "b"))[0] == pytest.approx(before + d.granted)
        assert raw_rows(db_target, "SELECT ended_at IS NOT NULL FROM workers WHERE "
                                   "worker='w0'")[0][0]
        fence = LeaseFence("b", "w0", "token0", 60)
        await conn.execute("BEGIN")
        with pytest.raises(LostClaim):
            await fence.hold(conn, 0.0, "{}")
        await conn.execute("ROLLBACK")
    finally:
        claim.release()
        await gw.aclose()
        for c in drawers:
            await c.close()
        await conn.close()


@pytest.mark.slow
def test_run_workers_stops_at_the_budget_cap_across_both_workers(tmp_path, slow_sim,
                                                                 any_db, receiver):
    port, cfg = slow_sim
    cfg.write_text(cfg.read_text() + f"""
[[alerts.webhooks]]
name = "oncall"
url = "http://127.0.0.1:{receiver.port}/hook"
[alerts]
drain_s = 3
""")
    cfg.chmod(0o600)  # it holds a webhook's URL
    n = 600
    one = PriceTable(shipped_prices()).cost(
        "deepseek-v3.2", Task(id="x", prompt="task 100").prompt_tokens_estimate(), 16)
    assert one
    cap = round(250 * one, 8)  # about 250 calls' estimate of the 600
    w = _workload(tmp_path, n)
    proc = _run(w, cfg, 2, extra=["--budget", str(cap)])
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, err  # the budget's exit code, as a single process's
    assert "stopped at the budget cap" in err
    s = json.loads(out)
    assert s["status"] == "budget_stopped" and s["unfinished"] > 0
    assert 0.5 * cap < s["cost_usd"] <= cap + 1e-12  # never over, little left unspent
    served = _served(port)
    assert served == s["succeeded"] + s["failed"]  # nothing paid and not stored
    # both workers drew on the cap; the ledger holds each stored result's cost once
    assert _count(any_db, "SELECT COUNT(*) FROM workers WHERE granted_usd > 0") == 2
    spent = raw_rows(any_db, "SELECT SUM(spent_usd) FROM workers")[0][0]
    assert spent == pytest.approx(s["cost_usd"], rel=1e-9)
    events = [r[0] for r in raw_rows(any_db, "SELECT detail_json FROM events WHERE "
                                             "kind='control'")]
    assert any(d.startswith(f"budget cap ${cap:.4f} reached") for d in events), events
    assert any(d.startswith("budget: 80% reached") for d in events), events
    # the run's alerts paged once, not once per worker: the draw that crossed 80 %, the
    # worker that stopped the run, its end
    kinds = [a["kind"] for a in receiver.json()]
    assert sorted(kinds) == ["budget_80", "budget_stop", "run_interrupted"], kinds
    stop = next(a for a in receiver.json() if a["kind"] == "budget_stop")
    assert stop["details"]["unsent"] == s["unfinished"] + s["cancelled"]
    assert any(d.startswith("alert run_interrupted → oncall: delivered") for d in _log(any_db))
    # resumable in one process under a higher cap: the rest once each
    proc = subprocess_resume(s["run_id"], cfg)
    out, err = proc.communicate(timeout=120)
    # 3: its SLA judged missed — the 200 ms gateway's p95 past 350 ms on a loaded machine
    # (the run's own verdict, not the resume's; the next lines check what was resumed)
    assert proc.returncode in (0, 3), err
    s2 = json.loads(out)
    assert (s2["status"], s2["succeeded"]) == ("finished", n)
    assert _served(port) == n


def _log(db) -> list[str]:
    return [r[0] for r in raw_rows(db, "SELECT detail_json FROM events WHERE detail_json "
                                       "IS NOT NULL ORDER BY id")]


def subprocess_resume(run_id: str, cfg) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "resume", run_id, "--config", str(cfg),
         "--budget", "5", "--json", "--quiet"],
        env={**os.environ, "GW_KEY": TEST_KEY}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
