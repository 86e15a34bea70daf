"""Auto mode: what one evaluation of the gates does to a progressing canary. Pure."""

from __future__ import annotations

from swarm_tui.canary import state as st
from swarm_tui.canary.analysis import FAIL, INCONCLUSIVE, Analysis
from swarm_tui.core.fmt import config_duration
from swarm_tui.core.record import replace
from swarm_tui.settings.sections import CanaryConfig


def decide(state: st.CanaryState, analysis: Analysis, cfg: CanaryConfig, now: float
           ) -> tuple[st.CanaryState, str | None, str | None]:
    """(new state, action taken or None, reason). Only a progressing canary moves:
    promote once every gate has passed for the whole bake time; abort after
    `failure_limit` consecutive failed evaluations; pause when still inconclusive
    past the bake time (never promote on too little traffic)."""
    if state.status != st.PROGRESSING:
        return state, None, None
    bake = cfg.bake_s(state.stage_index(cfg.stages))
    overall = analysis.overall
    if overall == FAIL:
        failures = state.failures + 1
        failed = "; ".join(f"{v.gate} failed: {v.detail}" for v in analysis.verdicts
                           if v.result == FAIL)
        if failures >= cfg.failure_limit:
            reason = f"{failed} ({failures} consecutive evaluations)"
            return st.transition(state, st.ABORT, None, cfg.stages, now), st.ABORT, reason
        return replace(state, failures=failures, passing_since=None), None, None
    if overall == INCONCLUSIVE:
        kept = replace(state, passing_since=None)
        if now - state.bake_started_at >= bake:
            why = "; ".join(f"{v.gate}: {v.detail}" for v in analysis.verdicts
                            if v.result == INCONCLUSIVE)
            reason = f"inconclusive after the {config_duration(bake)} bake time: {why}"
            return st.transition(kept, st.PAUSE, None, cfg.stages, now), st.PAUSE, reason
        return kept, None, None
    since = state.passing_since if state.passing_since is not None else now
    passing = replace(state, failures=0, passing_since=since)
    if now - since >= bake:
        shown = "; ".join(f"{v.gate} {v.detail}" for v in analysis.verdicts)
        reason = f"every gate passed for the {config_duration(bake)} bake time: {shown}"
        return st.transition(passing, st.PROMOTE, None, cfg.stages, now), st.PROMOTE, reason
    return passing, None, None
