"""The canary inside a running process: follows the stored state, evaluates, acts in auto mode.

It has its own database connection (the writer's is busy with its own transactions)
and runs on the engine's loop, so setting the router's percentage needs no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from swarm_tui.aio import cancel_and_wait
from swarm_tui.canary import state as st
from swarm_tui.canary import stored
from swarm_tui.canary.analysis import Analysis
from swarm_tui.canary.auto import decide
from swarm_tui.core.fmt import short_duration
from swarm_tui.core.plain import to_json
from swarm_tui.engine.looplag import LoopLag
from swarm_tui.engine.routing import CanaryRouter
from swarm_tui.settings.sections import CanaryConfig
from swarm_tui.store import canary as cs
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.db import db_error, open_db
from swarm_tui.store.notify import CANARY, Listener
from swarm_tui.store.target import DbTarget

POLL_S = 0.5  # another process's change reaches the router within this


@dataclass(frozen=True)
class CanaryView:
    """What the console shows: config, state, latest figures and verdicts, history."""

    cfg: CanaryConfig
    state: st.CanaryState
    analysis: Analysis | None
    history: tuple[cs.ActionRecord, ...] = field(default_factory=tuple)
    error: str | None = None
    started: bool = True  # False: nothing stored yet (the state shown is where it would start)
    as_of: float | None = None  # a replay's moment: its timers read that clock, not now

    def bake_s(self) -> float:
        return self.cfg.bake_s(self.state.stage_index(self.cfg.stages))

    def baked_s(self, now: float | None = None) -> float:
        now = (self.as_of or time.time()) if now is None else now
        return now - self.state.bake_started_at

    def status_line(self, now: float | None = None) -> str:
        s = self.state
        text = f"canary {s.pct}% {s.status}"
        if s.status == st.PROGRESSING:
            text += f" {short_duration(self.baked_s(now))}/{short_duration(self.bake_s())}"
        return text


async def read_view(db_target: DbTarget, cfg: CanaryConfig) -> CanaryView:
    """The canary as stored (for a console without a live run here); writes nothing."""
    conn = await open_db(db_target)
    try:
        started = await cs.read_state(conn, cfg.name) is not None
        state = await cs.peek_state(conn, cfg)
        return CanaryView(cfg, state, await stored.analyze(conn, cfg, state),
                          tuple(await cs.history(conn, cfg.name, 20)), started=started)
    except sqlite3.Error as e:
        raise db_error(db_target, e) from None
    finally:
        await conn.close()


async def view_at(conn: StoreConnection, cfg: CanaryConfig, at: float) -> CanaryView:
    """The canary as it was at `at` (a replay): its stage from the audit log, its gates
    evaluated on what had ended by then, its actions up to then; writes nothing."""
    state, started = await stored.state_at(conn, cfg, at)
    return CanaryView(cfg, state, await stored.analyze(conn, cfg, state, now=at, until=at),
                      tuple(await cs.history(conn, cfg.name, 20, until=at)), started=started,
                      as_of=at)


async def act_stored(db_target: DbTarget, cfg: CanaryConfig, action: str, arg: str | None,
                     reason: str | None, source: str = "console") -> st.CanaryState:
    """An action on the stored canary; a runner elsewhere follows it within POLL_S."""
    conn = await open_db(db_target)
    try:
        return await stored.act(conn, cfg, action, arg, source=source, reason=reason,
                                path=db_target)
    finally:
        await conn.close()


class CanaryController:
    def __init__(self, cfg: CanaryConfig, router: CanaryRouter, db_target: DbTarget,
                 on_change: Callable[[str], None] | None = None) -> None:
        self.cfg = cfg
        self.router = router
        self.db_target = db_target
        self.on_change = on_change
        # told of every stage change (old, new): alerts
        self.listeners: list[Callable[[st.CanaryState, st.CanaryState], None]] = []
        # told only of the changes this controller's own decision made (of a run's workers,
        # each following the same canary, the one whose decision landed pages it)
        self.own_moves: list[Callable[[st.CanaryState, st.CanaryState], None]] = []
        self.conn: StoreConnection | None = None
        self.state: st.CanaryState | None = None
        self.view: CanaryView | None = None
        self.error: str | None = None
        self._task: asyncio.Task[None] | None = None
        # never evaluated: its first look evaluates, however briefly the host has been up
        # (monotonic time starts near 0 at boot; 0.0 here skipped a fresh host's first
        # evaluations for `interval` seconds after boot)
        self._last_eval = -math.inf
        # the executor's loop-lag monitor (set once its runner exists): latency gates are
        # inconclusive while the client is the bottleneck
        self.client_lag: LoopLag | None = None
        # One connection, two callers (the loop and a console action): a transaction of one
        # must not interleave with the other's at an await.
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()

    def look_now(self) -> None:
        """Read the stored canary now, not at the next poll (a notification said it moved)."""
        self._wake.set()

    async def open(self) -> None:
        """Load (or create) the stored state and set the router before any task is routed."""
        self.conn = await open_db(self.db_target)
        try:
            self.state = await cs.load_state(self.conn, self.cfg, source="run")
        except sqlite3.Error as e:
            await self.close()
            raise db_error(self.db_target, e) from None
        self.router.set_pct(self.state.pct)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        # PostgreSQL: another process's change wakes this loop at once (every worker of a
        # split run routes the new percentage together); the poll stays as the net
        wake = self._wake
        listener = await Listener.open(
            self.db_target, (CANARY,),
            lambda _channel, name: self.look_now() if name in (self.cfg.name, "*") else None)
        try:
            while True:
                try:
                    async with self._lock:
                        await self.poll()
                        if time.monotonic() - self._last_eval >= self.cfg.interval:
                            await self.evaluate()
                    self.error = None
                except sqlite3.Error as e:  # keep routing as last known; show why
                    self.error = str(db_error(self.db_target, e))
                # asyncio.timeout, not wait_for: on 3.11 a wait_for whose wait ends as the
                # task is cancelled (a notification as the run stops) swallows the cancel,
                # and this loop then waited forever for the lock stop() holds
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(POLL_S, self.cfg.interval)):
                        await wake.wait()
                wake.clear()
        finally:
            if listener is not None:
                await listener.close()

    async def poll(self) -> None:
        assert self.conn is not None
        found = await cs.read_state(self.conn, self.cfg.name)
        if found is not None and (self.state is None or found.version != self.state.version):
            self._follow(found)

    def _follow(self, new: st.CanaryState) -> None:
        old = self.state
        self.state = new
        if old is None or old.pct != new.pct or old.status != new.status:
            self.router.set_pct(new.pct)
            if old is not None:
                if self.on_change is not None:
                    self.on_change(f"canary {old.pct}% → {new.pct}% ({new.status})")
                for listener in self.listeners:
                    listener(old, new)

    async def evaluate(self) -> None:
        """Figures for the stage and window; in auto mode, maybe promote / abort / pause."""
        assert self.conn is not None and self.state is not None
        self._last_eval = time.monotonic()
        state = self.state
        now = time.time()
        lag = (self.client_lag.p95_since_ms(state.stage_started_at)
               if self.client_lag is not None else None)
        if self.client_lag is not None:
            self.client_lag.judged_ms = lag
        analysis = await stored.analyze(self.conn, self.cfg, state, now, lag)
        if self.cfg.mode == "auto":
            after, action, reason = decide(state, analysis, self.cfg, now)
            if after != state:
                won = await cs.save(self.conn, state, after, action=action, actor="auto",
                                    source="auto", reason=reason,
                                    metrics_json=to_json(analysis))
                await self.poll()  # won or lost the race: follow what is stored
                # its own move only: what it wrote (the stored state may already be another
                # process's later move — which that process pages)
                if won and action is not None:
                    for listener in self.own_moves:
                        listener(state, after)
                if action is not None:
                    analysis = await stored.analyze(self.conn, self.cfg, self.state,
                                                client_lag_ms=lag)
        self.view = CanaryView(self.cfg, self.state, analysis,
                               tuple(await cs.history(self.conn, self.cfg.name, 20)),
                               self.error)

    async def act(self, action: str, arg: str | int | None, reason: str | None,
                  source: str = "console") -> st.CanaryState:
        assert self.conn is not None
        async with self._lock:
            new = await stored.act(self.conn, self.cfg, action, arg, source=source, reason=reason,
                               path=self.db_target)
            self._follow(new)
            await self.evaluate()
        return new

    async def stop(self) -> None:
        """Evaluate and follow no more. An evaluation under way ends first — its move saved
        and told to the listeners — so an abort decided as the run ends is paged before
        the run's end, never cut off mid-save or after the alerts closed."""
        if self._task is None:
            return
        async with self._lock:  # the loop is between evaluations, or waiting for this
            await cancel_and_wait(self._task)
        self._task = None

    async def close(self) -> None:
        await self.stop()
        if self.conn is not None:
            await self.conn.close()
            self.conn = None
