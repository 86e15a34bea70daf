"""Canary: the team's router, the state machine, the gates and auto mode (pure parts)."""

from __future__ import annotations

import hashlib
import random

import pytest

from swarm_tui.canary import state as st
from swarm_tui.canary.analysis import FAIL, INCONCLUSIVE, PASS, Analysis, evaluate, figures
from swarm_tui.canary.auto import decide
from swarm_tui.core.checks import checked
from swarm_tui.engine.routing import BASELINE, CANDIDATE, CanaryRouter, canary_slot
from swarm_tui.settings.sections import CanaryConfig, CanaryGates
from swarm_tui.workload import Task

STAGES = [5, 25, 50, 100]


# -- the router --------------------------------------------------------------------------------
@pytest.mark.parametrize(("user", "slot"), [
    ("user-1", 79), ("alice", 20), ("42", 53), ("demo-00000", 19), ("사용자-7", 12), ("", 49),
])
def test_router_matches_team_formula_on_fixed_vectors(user, slot):
    assert canary_slot(user) == slot
    digest = hashlib.sha256(user.encode("utf-8")).digest()
    assert int.from_bytes(digest, "big") % 100 == slot  # the same number, another way


def test_task_without_user_id_routes_by_task_id():
    r = CanaryRouter("base", "cand", pct=50)
    t = Task(id="alice", prompt="x")
    expected = ("cand", CANDIDATE) if canary_slot("alice") < 50 else ("base", BASELINE)
    assert r.route(t) == expected
    assert r.route(Task(id="other", prompt="x", user_id="alice")) == expected


def test_split_of_10k_random_users_is_within_1_5_points_per_stage():
    rng = random.Random(20261202)
    users = [f"u{rng.getrandbits(64):016x}" for _ in range(10_000)]
    for pct in STAGES:
        r = CanaryRouter("base", "cand", pct)
        share = sum(r.route(Task(id=u, prompt="x"))[1] == CANDIDATE for u in users) / 100
        assert abs(share - pct) <= 1.5, (pct, share)


def test_raising_the_percentage_never_moves_a_user_back():
    rng = random.Random(7)
    users = [f"user-{rng.random()}" for _ in range(5_000)]
    ladder = [0, *STAGES]
    for lo in ladder:
        for hi in ladder:
            if lo >= hi:
                continue
            on_lo = {u for u in users if canary_slot(u) < lo}
            on_hi = {u for u in users if canary_slot(u) < hi}
            assert on_lo <= on_hi, (lo, hi)


def test_router_version_bumps_only_on_change():
    r = CanaryRouter("b", "c", 5)
    r.set_pct(5)
    assert r.version == 0
    r.set_pct(25)
    assert r.version == 1


# -- the state machine ---------------------------------------------------------------------------
def _state(status: str = st.PROGRESSING, pct: int = 5) -> st.CanaryState:
    return st.CanaryState("b->c", "b", "c", status, pct, 100.0, 100.0, passing_since=110.0,
                          failures=1)


@pytest.mark.parametrize(("action", "arg", "pct", "status"), [
    (st.PROMOTE, None, 25, st.PROGRESSING),
    (st.PROMOTE_FULL, None, 100, st.COMPLETE),
    (st.PAUSE, None, 5, st.PAUSED),
    (st.ABORT, None, 0, st.ABORTED),
    (st.SET, "50", 50, st.PROGRESSING),
    (st.SET, "100%", 100, st.COMPLETE),
])
def test_actions_from_progressing(action, arg, pct, status):
    new = st.transition(_state(), action, arg, STAGES, 200.0)
    assert (new.pct, new.status) == (pct, status)
    if new.pct != 5:  # a new percentage is a new stage: fresh window, timer, counters
        assert (new.stage_started_at, new.bake_started_at, new.failures) == (200.0, 200.0, 0)
        assert new.passing_since is None


def test_promote_from_last_stage_below_100_completes():
    assert st.transition(_state(pct=50), st.PROMOTE, None, STAGES, 1.0).status == st.COMPLETE
    # after a `set` between stages, promote goes to the next configured stage above it
    assert st.transition(_state(pct=30), st.PROMOTE, None, STAGES, 1.0).pct == 50


@pytest.mark.parametrize(("status", "action"), [
    (st.ABORTED, st.PROMOTE), (st.ABORTED, st.SET), (st.ABORTED, st.PAUSE),
    (st.PAUSED, st.PAUSE), (st.PROGRESSING, st.RESUME), (st.PROGRESSING, st.RETRY),
    (st.COMPLETE, st.PROMOTE), (st.COMPLETE, st.RESUME), (st.ABORTED, st.ABORT),
])
def test_actions_refused_in_the_wrong_state(status, action):
    with pytest.raises(st.ActionRefused, match=f"cannot {action} while {status}"):
        st.transition(_state(status, 0 if status == st.ABORTED else 5), action, "10",
                      STAGES, 1.0)


def test_resume_restarts_the_bake_timer_but_keeps_the_stage_window():
    new = st.transition(_state(st.PAUSED), st.RESUME, None, STAGES, 300.0)
    assert (new.status, new.stage_started_at, new.bake_started_at) == (st.PROGRESSING, 100.0,
                                                                        300.0)


def test_retry_after_abort_starts_at_the_first_stage():
    new = st.transition(_state(st.ABORTED, 0), st.RETRY, None, STAGES, 5.0)
    assert (new.pct, new.status) == (5, st.PROGRESSING)


@pytest.mark.parametrize("arg", ["0", "101", "ten", None])
def test_set_needs_a_percentage_in_range(arg):
    with pytest.raises(st.ActionRefused):
        st.transition(_state(), st.SET, arg, STAGES, 1.0)


# -- figures and gates ---------------------------------------------------------------------------
def _rows(bucket: str, n: int, latency: float, cost: float | None = 0.001, failed: int = 0):
    ok = [(bucket, "succeeded", latency + i % 10, latency / 3, 700, 250, cost)
          for i in range(n - failed)]
    return ok + [(bucket, "failed", None, None, 0, 0, None)] * failed


def _calls(bucket: str, n: int, errors: int = 0):
    return [(bucket, "ok", None)] * (n - errors) + [(bucket, "error", "server")] * errors


def test_figures_per_bucket():
    f = figures(_rows(BASELINE, 100, 400.0, failed=2) + _rows(CANDIDATE, 50, 200.0),
                _calls(BASELINE, 110, errors=12) + _calls(CANDIDATE, 50))
    b, c = f[BASELINE], f[CANDIDATE]
    assert (b.tasks, b.succeeded, b.calls, b.call_errors) == (100, 98, 110, 12)
    assert b.errors == {"server": 12}
    assert b.task_success == pytest.approx(0.98)
    assert b.call_success == pytest.approx(98 / 110)
    assert c.latency_ms.p50 == 204.0  # nearest rank over 200..209 repeated
    assert c.cost_per_task_usd == pytest.approx(0.001)
    assert c.tokens_in_per_task == 700


def test_unpriced_candidate_makes_the_cost_gate_inconclusive_not_zero():
    f = figures(_rows(BASELINE, 100, 300.0) + _rows(CANDIDATE, 100, 300.0, cost=None),
                _calls(BASELINE, 100) + _calls(CANDIDATE, 100))
    assert f[CANDIDATE].cost_per_task_usd is None and f[CANDIDATE].unpriced == 100
    cost = next(v for v in evaluate(f, CanaryGates(), 50) if v.gate == "cost")
    assert (cost.result, cost.detail) == (INCONCLUSIVE, "unpriced model")


def _verdicts(cand_latency=250.0, cand_errors=0, cand_cost=0.001, n=100, ratio=None):
    f = figures(_rows(BASELINE, 100, 300.0) + _rows(CANDIDATE, n, cand_latency, cand_cost),
                _calls(BASELINE, 100) + _calls(CANDIDATE, n, cand_errors))
    return {v.gate: v.result for v in evaluate(f, CanaryGates(max_p95_ratio=ratio), 50)}


def test_gates_pass_fail_inconclusive():
    assert _verdicts() == {"p95": PASS, "success": PASS, "cost": PASS}
    assert _verdicts(cand_latency=400.0)["p95"] == FAIL
    assert _verdicts(cand_errors=5)["success"] == FAIL          # 95 % of calls
    assert _verdicts(cand_cost=0.00111)["cost"] == FAIL          # > 1.10 × baseline
    assert _verdicts(cand_cost=0.00109)["cost"] == PASS
    assert set(_verdicts(n=10).values()) == {INCONCLUSIVE}       # < min_samples
    assert _verdicts(cand_latency=330.0, ratio=1.05)["p95-ratio"] == FAIL
    assert _verdicts(cand_latency=300.0, ratio=1.05)["p95-ratio"] == PASS


# -- auto mode -------------------------------------------------------------------------------------
def _analysis(result: str) -> Analysis:
    from swarm_tui.canary.analysis import Verdict

    empty = figures([], [])
    return Analysis(at=0, stage=empty, window=empty, window_s=60,
                    verdicts=[Verdict(gate="p95", result=result, detail="d"),
                              Verdict(gate="success", result=PASS, detail="d")])


AUTO = checked(CanaryConfig, dict(baseline="b", candidate="c", mode="auto", bake="10s",
                                   failure_limit=3))


def test_auto_promotes_only_after_passing_for_the_whole_bake():
    s = st.CanaryState("b->c", "b", "c", st.PROGRESSING, 5, 0.0, 0.0)
    s, action, _ = decide(s, _analysis(PASS), AUTO, now=4.0)
    assert action is None and s.passing_since == 4.0
    s, action, _ = decide(s, _analysis(PASS), AUTO, now=13.9)
    assert action is None
    s, action, reason = decide(s, _analysis(PASS), AUTO, now=14.0)
    assert (action, s.pct, s.status) == (st.PROMOTE, 25, st.PROGRESSING)
    assert "every gate passed for the 10s bake time" in reason


def test_auto_aborts_after_failure_limit_consecutive_failures():
    s = st.CanaryState("b->c", "b", "c", st.PROGRESSING, 25, 0.0, 0.0)
    for i in range(2):
        s, action, _ = decide(s, _analysis(FAIL), AUTO, now=float(i))
        assert action is None and s.failures == i + 1
    s, action, reason = decide(s, _analysis(FAIL), AUTO, now=3.0)
    assert (action, s.pct, s.status) == (st.ABORT, 0, st.ABORTED)
    assert "p95 failed" in reason and "3 consecutive" in reason


def test_a_pass_resets_the_failure_streak():
    s = st.CanaryState("b->c", "b", "c", st.PROGRESSING, 25, 0.0, 0.0, failures=2)
    s, _, _ = decide(s, _analysis(PASS), AUTO, now=1.0)
    assert s.failures == 0


def test_auto_pauses_when_inconclusive_past_bake_and_never_promotes():
    s = st.CanaryState("b->c", "b", "c", st.PROGRESSING, 5, 0.0, 0.0)
    s, action, _ = decide(s, _analysis(INCONCLUSIVE), AUTO, now=9.0)
    assert action is None
    s, action, reason = decide(s, _analysis(INCONCLUSIVE), AUTO, now=10.0)
    assert (action, s.pct, s.status) == (st.PAUSE, 5, st.PAUSED)
    assert reason.startswith("inconclusive after the 10s bake time")
    assert decide(s, _analysis(PASS), AUTO, now=100.0)[1] is None  # paused: auto waits


def test_canary_config_validation():
    with pytest.raises(ValueError, match="strictly increasing"):
        checked(CanaryConfig, dict(baseline="b", candidate="c", stages=[5, 5, 100]))
    with pytest.raises(ValueError, match="ending at 100"):
        checked(CanaryConfig, dict(baseline="b", candidate="c", stages=[5, 50]))
    with pytest.raises(ValueError, match="different gateways"):
        checked(CanaryConfig, dict(baseline="b", candidate="b"))
    with pytest.raises(ValueError, match="2 values for 4 stages"):
        checked(CanaryConfig, dict(baseline="b", candidate="c", bake=["1h", "2h"]))
    assert checked(CanaryConfig, dict(baseline="b", candidate="c", bake="24h")).bake_s(0) == 86_400


def test_every_listed_action_has_its_states_in_the_listed_order():
    """The command line lists canary/actions.py's names; state.py says when each is allowed."""
    assert tuple(st.ALLOWED) == st.ACTIONS
