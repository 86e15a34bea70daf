"""The canary as stored, judged: acting on it (a compare-and-swap through the store,
audited with the figures it was taken on), its gates evaluated on the stored rows, and
its state at a past moment rebuilt from its audit log (a replay). The store only keeps
the rows (store/canary.py); what they mean is decided here."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from swarm_tui.canary import state as st
from swarm_tui.canary.analysis import Analysis, evaluate, figures
from swarm_tui.core.plain import to_json
from swarm_tui.core.record import replace
from swarm_tui.settings.sections import CanaryConfig
from swarm_tui.store import canary as cs
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.control import os_user
from swarm_tui.store.db import db_error
from swarm_tui.store.target import DbTarget


async def act(conn: StoreConnection, cfg: CanaryConfig, action: str,
              arg: str | int | None = None, *, actor: str | None = None, source: str = "cli",
              reason: str | None = None, path: DbTarget | None = None) -> st.CanaryState:
    """Apply an operator's action (ActionRefused if not allowed now), audited with the
    figures it was taken on. Retries a lost compare-and-swap against the new state."""
    actor = actor or os_user()
    try:
        for _ in range(5):
            before = await cs.load_state(conn, cfg, source=source)
            now = time.time()
            after = st.transition(before, action, arg, cfg.stages, now)
            figs = await analyze(conn, cfg, before, now)
            if await cs.save(conn, before, after, action=action, actor=actor, source=source,
                             reason=reason or None, metrics_json=to_json(figs)):
                return await cs.read_state(conn, cfg.name) or after
    except sqlite3.Error as e:
        raise db_error(path or Path("?"), e) from None
    raise st.ActionRefused(f"canary {cfg.name}: changed by someone else five times; try again")


async def analyze(conn: StoreConnection, cfg: CanaryConfig, state: st.CanaryState,
                  now: float | None = None, client_lag_ms: float | None = None,
                  until: float | None = None) -> Analysis:
    """`client_lag_ms`: the executor's scheduling delay over the stage (see evaluate).
    `until`: only what had ended by then (a replay's gates as they were evaluated then)."""
    now = time.time() if now is None else now
    stage = figures(*await cs.figure_rows(conn, cfg, state.stage_started_at, until))
    window = figures(*await cs.figure_rows(conn, cfg, now - cfg.window, until))
    return Analysis(at=now, stage=stage, window=window, window_s=cfg.window,
                    verdicts=evaluate(stage, cfg.gates, cfg.min_samples, client_lag_ms))


async def state_at(conn: StoreConnection, cfg: CanaryConfig, at: float
                   ) -> tuple[st.CanaryState, bool]:
    """The canary as it stood at `at` (a replay), rebuilt from its audit log: each action
    moved it to its `to_pct` / `to_status`; a new stage (or a resume) restarts the bake.
    With no action by then, where it would have started (and False)."""
    rows = await cs.moves_until(conn, cfg.name, at)
    if not rows:
        return st.initial(cfg.name, cfg.baseline, cfg.candidate, cfg.stages, at), False
    state = st.initial(cfg.name, cfg.baseline, cfg.candidate, cfg.stages, rows[0][0])
    for when, to_pct, to_status in rows:
        pct = state.pct if to_pct is None else to_pct
        status = to_status or state.status
        moved = pct != state.pct or (status == st.PROGRESSING and state.status != status)
        state = replace(
            state, pct=pct, status=status, updated_at=when,
            stage_started_at=when if pct != state.pct else state.stage_started_at,
            bake_started_at=when if moved else state.bake_started_at)
    return state, True
