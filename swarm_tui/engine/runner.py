"""SwarmRunner: bounded, adjustable concurrency over many tasks; partial failures never stop it.

Dispatch is one loop that starts an attempt whenever a slot is free. An attempt
that fails retryably gives its slot back while it waits (so a Retry-After storm
does not starve the swarm) and comes back ahead of never-tried tasks.

Why one ~650-line module: the queue, the parking per (gateway, model), the budget, the
pace, holds and cancellation are one set of invariants over the same counters
(in_flight, retry_waiting, the queues); split across modules they were passed around
and drifted (a double-counted retry wait hung cancelled runs). Helpers with no state of
their own live elsewhere: retry waits (retry.py), routing (routing.py), records (core/records.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from swarm_tui.core import events as ev
from swarm_tui.core.records import Attempt, TaskHead, TaskRecord
from swarm_tui.core.states import (
    CANCELLED,
    FAILED,
    PERMIT_HOLD,
    QUEUED,
    RETRYING,
    RUNNING,
    SUCCEEDED,
    AttemptOutcome,
    TaskState,
)
from swarm_tui.engine.bodies import MemoryBodies, TaskBodies
from swarm_tui.engine.looplag import LoopLag
from swarm_tui.engine.retry import retry_wait_s
from swarm_tui.engine.routing import Router, choose_model, fallback_chain
from swarm_tui.gateway.client import GatewayClient
from swarm_tui.gateway.errors import AUTH, RATE_LIMITED, CallError
from swarm_tui.gateway.keypool import KeyPool, KeySlot
from swarm_tui.prices import PriceTable
from swarm_tui.settings.sections import RetryConfig, RoutingConfig
from swarm_tui.workload import Task


@dataclass(frozen=True)
class RunPolicy:
    concurrency: int
    retry: RetryConfig
    routing: RoutingConfig
    default_model: str
    budget_usd: float | None = None  # per-run cap: dispatch stops before it is reached
    spent_before_usd: float = 0.0    # what earlier sessions of this run already cost
    # open-loop pace: at most this many sends per second (None: as fast as slots free up)
    max_calls_per_s: float | None = None
    # False when a store keeps every result: a finished task's answer is let
    # go once its event is out (the writer copied them), so memory does not grow with the
    # answers of a long run (~4.8 KB each in the team's shape); the detail view reads the
    # answer back from the store. Its attempts go too (their counts stay: TaskRecord.settle).
    keep_answers: bool = True


BUDGET_WARN_AT = 0.8
BUDGET_STOPPED = "budget_stopped"
DEFAULT_OUTPUT_ESTIMATE = 512  # tokens, for a call's cost before any call has finished
CANCEL_GRACE_S = 5.0  # after a cancel, calls still running then are booked cancelled

class SwarmRunner:
    def __init__(
        self,
        tasks: Iterable[Task | TaskHead],
        gateways: dict[str, GatewayClient],
        router: Router,
        policy: RunPolicy,
        prices: PriceTable,
        consumers: Iterable[ev.Consumer] = (),
        seed: int | None = None,
        seqs: Sequence[int] | None = None,
        prior_attempts: Sequence[int] | None = None,
        bodies: TaskBodies | None = None,
    ) -> None:
        """`seqs` / `prior_attempts` resume a stored run: each task's number in the run
        and how many attempts an earlier session already stored for it. With `bodies`
        (a stored run) `tasks` may be heads only: each prompt is read at its send;
        without, the tasks given are kept and sent from memory."""
        self.gateways = gateways
        self.policy = policy
        self.prices = prices
        self.consumers = list(consumers)
        self.rng = random.Random(seed)
        self.router = router
        items: Iterable[Task | TaskHead] = tasks
        if bodies is None:
            kept = list(tasks)
            if not all(isinstance(t, Task) for t in kept):
                raise TypeError("tasks given as heads need `bodies` to read their prompts from")
            bodies, items = MemoryBodies(kept), kept  # type: ignore[arg-type]
        self.bodies = bodies
        self._chains: dict[str, tuple[str, ...]] = {}  # fallback chain by first model
        self.agents = [self._agent(i, t.head() if isinstance(t, Task) else t)
                       for i, t in enumerate(items)]
        for agent, seq in zip(self.agents, seqs or (), strict=False):
            agent.seq = seq
        for agent, prior in zip(self.agents, prior_attempts or (), strict=False):
            agent.prior_attempts = prior
        self.limit = policy.concurrency
        self.paused = False
        self.cancelled = False
        self.in_flight = 0
        self.retry_waiting = 0
        self.done = 0
        self.counts: dict[str, int] = {SUCCEEDED: 0, FAILED: 0, CANCELLED: 0}
        self.consumer_errors = 0
        self.consumer_error: str | None = None
        self.t0 = 0.0
        self.started_wall = 0.0
        self.wall_ms = 0.0
        # Tasks whose gateway has no key ready for their model wait here, per gateway and
        # model — (retries, never sent) — so another model or the canary's other gateway
        # keeps dispatching (no head-of-line blocking), and a retry never queues behind
        # never-sent tasks.
        self._parked: dict[tuple[str, str], tuple[deque[TaskRecord], deque[TaskRecord]]] = {}
        self._park_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self.stop_reason: str | None = None  # budget_stopped: no new sends, nothing cancelled
        # Reasons dispatch is held (e.g. the store cannot take results): nothing new is
        # sent while any is set; calls in flight finish.
        self.holds: dict[str, str] = {}
        # asked before every send: None, or why nothing may be sent now (a worker's lease
        # not renewed in time on its own clock); the hold it causes is released by the
        # permit's owner
        self.send_permit: Callable[[], str | None] | None = None
        self.spent_usd = policy.spent_before_usd
        # calls answered without usage, counted by the cap at their ceiling less their
        # estimated cost (the cap's figure is spent + this; the report's stays spent)
        self.unmetered_usd = 0.0
        self.cap_passed = False
        self.in_flight_est_usd = 0.0  # estimated cost of the calls in flight
        self._model_dearest: dict[str, float] = {}  # the dearest finished call per model
        self.budget_warned = False
        # A cap shared by a run's workers: this process may commit up to `allowance`, drawn
        # from the store by the worker's feed (run/workers.py), which also tells it
        # what the others hold (`others_usd`, for the 80 % warning). `budget_short`: the
        # estimate of the call waiting for more allowance (0: none waits).
        self.allowance: float | None = None
        self.others_usd = 0.0
        self.budget_short = 0.0
        self._unpriced_warned: set[str] = set()
        self._pending: deque[TaskRecord] = deque()
        self._retry_ready: deque[TaskRecord] = deque()
        # never-sent tasks back from parking, by their place in the workload: they rejoin
        # `_pending` in submission order (ahead of them, they once grouped a whole model
        # or gateway first — a canary's candidate then got no traffic within its bake)
        self._unparked: list[tuple[int, TaskRecord]] = []
        self._wake = asyncio.Event()
        self.loop_lag = LoopLag()  # the client's own scheduling delay (client-bound mark)
        self._next_send = 0.0  # perf_counter time the pace allows the next send at
        self._pace_timer: asyncio.TimerHandle | None = None
        # a worker (run/worker.py) adds the batches it leases while the run goes
        # on: until `end_feed`, running out of tasks is waiting, not the end
        self.feeding = False

    def add_tasks(self, heads: Sequence[TaskHead], seqs: Sequence[int],
                  prior_attempts: Sequence[int]) -> None:
        """More of a stored run's tasks (by seq) for this runner to send."""
        start = len(self.agents)
        new = [self._agent(start + k, head) for k, head in enumerate(heads)]
        for agent, seq, prior in zip(new, seqs, prior_attempts, strict=True):
            agent.seq, agent.prior_attempts = seq, prior
        self.agents.extend(new)
        if self.t0:  # running: queue them now (before the run, run() queues every agent)
            now = time.perf_counter()
            for agent in new:
                agent.ready_at = now
                self._pending.append(agent)
                self.emit(ev.QUEUED, agent)
            self._wake.set()

    @property
    def backlog(self) -> int:
        """Tasks queued here and not yet sent (what a worker leases more batches against)."""
        return len(self._pending) + len(self._unparked) + len(self._retry_ready)

    def end_feed(self) -> None:
        self.feeding = False
        self._wake.set()

    def _agent(self, i: int, task: TaskHead) -> TaskRecord:
        agent = TaskRecord(i, i, task, "", "", "", (), runner=self)
        self._route(agent)
        return agent

    def _route(self, agent: TaskRecord) -> None:
        """Gateway, bucket and model for a task's first send. A canary stage change
        re-routes tasks not yet sent (a retry stays on its gateway: same user, same side)."""
        gw_name, agent.bucket = self.router.route(agent.task)
        agent.gateway = gw_name
        agent.route_version = self.router.version
        pinned = self.gateways[gw_name].pinned_model
        agent.model = choose_model(agent.task, self.policy.routing, self.policy.default_model,
                                   pinned)
        chain = self._chains.get(agent.model)
        if chain is None:
            chain = self._chains[agent.model] = fallback_chain(agent.model,
                                                               self.policy.routing)
        agent.fallbacks = chain

    # -- clock and events ------------------------------------------------------------------
    def now_ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000.0

    def emit(self, kind: ev.EventKind, agent: TaskRecord | None = None,
             attempt: Attempt | None = None, detail: str | None = None) -> None:
        event = ev.Event(kind, self.now_ms(), agent, attempt, detail)
        for consumer in self.consumers:
            try:
                consumer(event)
            except Exception as exc:  # a broken consumer must not stop the swarm
                self.consumer_errors += 1
                if self.consumer_error is None:  # the first, said once the run has ended
                    self.consumer_error = (f"{getattr(consumer, '__qualname__', consumer)}: "
                                           f"{type(exc).__name__}: {exc}")

    # -- controls (safe to call from the same event loop at any time) ----------------------
    def set_rate_share(self, share: float) -> None:
        """This process's part of its keys' quotas (a run's workers share the keys)."""
        for gw in self.gateways.values():
            gw.pool.set_share(share)

    def set_concurrency(self, n: int) -> None:
        self.limit = max(1, int(n))
        self.emit(ev.CONTROL, detail=f"concurrency={self.limit}")
        self._wake.set()

    def pause(self) -> None:
        self.paused = True
        self.emit(ev.CONTROL, detail="paused")

    def resume(self) -> None:
        self.paused = False
        self.emit(ev.CONTROL, detail="resumed")
        self._wake.set()

    def hold(self, reason: str, detail: str) -> None:
        """Send nothing new until `release(reason)`; calls in flight go on."""
        self.holds[reason] = detail
        self.emit(ev.CONTROL, detail=detail)

    def release(self, reason: str, detail: str) -> None:
        if self.holds.pop(reason, None) is not None:
            self.emit(ev.CONTROL, detail=detail)
            self._wake.set()

    def stop(self, reason: str, detail: str) -> None:
        """No more sends for good (like the budget cap): calls in flight finish, unsent
        tasks stay resumable."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self.emit(ev.CONTROL, detail=detail)
            self._drop_retry_waits()
        self._wake.set()

    def _drop_retry_waits(self) -> None:
        """Dispatch stopped for good: a retry still waiting out its backoff will never be
        sent, so it stops waiting now and stays unsent (resumable) — the run ends when
        the calls in flight do, not a Retry-After later."""
        for agent in self.agents:
            if agent.state == RETRYING:
                if agent.handle is not None and not isinstance(agent.handle, asyncio.Task):
                    agent.handle.cancel()
                agent.handle = None
                agent.state = QUEUED
                self.retry_waiting -= 1

    # -- budget -----------------------------------------------------------------------------
    def call_estimate_usd(self, agent: TaskRecord) -> float | None:
        """What the agent's next call may cost, at most: its prompt's guaranteed token
        bound (UTF-8 bytes: no script passes it) plus its max_tokens — which a capped run
        sends with every call (DEFAULT_OUTPUT_ESTIMATE when the task gives none) — at the
        model's price, or the dearest call this run has finished on the model if more.
        None: unpriced model."""
        out = agent.task.max_tokens or DEFAULT_OUTPUT_ESTIMATE
        head = agent.task
        bound = self.prices.cost(agent.model, head.prompt_bound or head.prompt_tokens, out)
        dearest = self._model_dearest.get(agent.model)
        if bound is None:
            return dearest
        return bound if dearest is None else max(bound, dearest)

    def _over_budget(self, agent: TaskRecord) -> bool:
        """True: do not send this call now. Spent + the in-flight calls' estimates + this
        call would pass the cap: wait while calls are in flight (each completion wakes
        dispatch to look again); with none in flight, stop dispatch for good."""
        cap = self.policy.budget_usd
        assert cap is not None
        est = self.call_estimate_usd(agent)
        if est is None:
            if agent.model not in self._unpriced_warned:
                self._unpriced_warned.add(agent.model)
                self.emit(ev.CONTROL, detail=f"budget: {agent.model} is unpriced; its calls "
                                             "cannot be counted against the cap")
            est = 0.0
        agent.budget_est = est
        committed = self.spent_usd + self.unmetered_usd + self.in_flight_est_usd + est
        if not self.budget_warned and committed + self.others_usd >= BUDGET_WARN_AT * cap:
            self.budget_warned = True
            others = f" + ${self.others_usd:.4f} other workers'" if self.others_usd else ""
            self.emit(ev.CONTROL, detail=f"budget: 80% reached (${self.spent_usd:.4f} spent "
                                         f"+ ${self.in_flight_est_usd:.4f} in flight{others} "
                                         f"of ${cap:.4f})")
        if self.allowance is not None:  # shared: wait for the feed to draw more, or stop
            if committed <= self.allowance:
                self.budget_short = 0.0
                return False
            self.budget_short = est
            return True
        if committed < cap:
            return False
        if self.in_flight:
            return True
        self.stop_at_budget(cap, est, f"${self.spent_usd:.4f} spent")
        return True

    def _check_cap_passed(self) -> None:
        """A gateway billed more than a call's ceiling (its own token count passed the
        prompt's bytes, or output past max_tokens): said once, with the overshoot."""
        cap = self.policy.budget_usd
        if cap is None or self.cap_passed or self.spent_usd <= cap:
            return
        self.cap_passed = True
        self.emit(ev.CONTROL, detail=f"budget: PASSED the cap — ${self.spent_usd:.4f} spent "
                                     f"of ${cap:.4f} (+${self.spent_usd - cap:.4f}): the "
                                     "gateway billed past a call's ceiling")

    def stop_at_budget(self, cap: float, est: float, spent: str) -> None:
        """Dispatch stops for good: the next call (≈ `est`) would pass the cap."""
        self.stop_reason = BUDGET_STOPPED
        self._drop_retry_waits()
        unsent = sum(1 for a in self.agents if a.state == QUEUED)
        self.emit(ev.CONTROL, detail=f"budget cap ${cap:.4f} reached ({spent}; the next call "
                                     f"≈ ${est:.4f}): dispatch stopped, {unsent} tasks unsent "
                                     "(resumable)")
        self._wake.set()

    def allow(self, usd: float) -> None:
        """More of a shared cap drawn for this process: the call waiting for it goes."""
        self.allowance = (self.allowance or 0.0) + usd
        self.budget_short = 0.0
        self._wake.set()

    def _settle_estimate(self, agent: TaskRecord) -> None:
        self.in_flight_est_usd -= agent.budget_est
        agent.budget_est = 0.0

    def wake(self) -> None:
        """Look at the queue again now (a key came back or was added, routing changed)."""
        for key in list(self._parked):
            timer = self._park_timers.pop(key, None)
            if timer is not None:
                timer.cancel()
            self._unpark(key)
        self._wake.set()

    @property
    def waiting_for_keys(self) -> str | None:
        """What parked tasks wait for, when it is worth saying (`sim keys cooling until
        14:02:07`, `no usable key on sim`); None while nothing waits for long."""
        longest: tuple[float, str] | None = None
        now = time.monotonic()
        for (gw_name, model), (retries, fresh) in self._parked.items():
            if not (retries or fresh):
                continue
            wait = self.gateways[gw_name].pool.next_ready_in(model, now)
            if wait is None:
                return (f"no usable key on {gw_name} (all disabled or retired): add or enable "
                        "one; unsent tasks stay resumable")
            if wait >= 0.5 and (longest is None or wait > longest[0]):
                until = time.strftime("%H:%M:%S", time.localtime(time.time() + wait))
                longest = (wait, f"{gw_name} keys cooling for {model} until {until}")
        return longest[1] if longest else None

    def cancel(self) -> None:
        """Stop dispatching, cancel everything queued, waiting or in flight."""
        if self.cancelled:
            return
        self.cancelled = True
        self.emit(ev.CONTROL, detail="cancel")
        for agent in self.agents:
            if not agent.final:
                self.cancel_agent(agent.index)
        self._wake.set()
        with contextlib.suppress(RuntimeError):  # no running loop: nothing in flight
            asyncio.get_running_loop().call_later(CANCEL_GRACE_S, self._reap_after_cancel)

    def _reap_after_cancel(self) -> None:
        """A cancelled run must end: a call whose transport swallowed the cancellation
        (seen once under heavy load: a cancelled console run stayed RUNNING for a minute)
        is booked cancelled here, and its late answer, if any, is ignored."""
        reaped = 0
        for agent in self.agents:
            attempt = agent.attempts[-1] if agent.attempts else None
            if (isinstance(agent.handle, asyncio.Task) and not agent.handle.done()
                    and attempt is not None and attempt.outcome == AttemptOutcome.RUNNING):
                agent.handle.cancel()
                attempt.outcome = AttemptOutcome.CANCELLED
                attempt.latency_ms = self.now_ms() - attempt.started_ms
                self.in_flight -= 1
                self._settle_estimate(agent)
                self._finish_cancelled(agent)
                reaped += 1
        if reaped:
            self.emit(ev.CONTROL, detail=f"cancel: {reaped} calls did not stop within "
                                         f"{CANCEL_GRACE_S:.0f} s; booked cancelled")
            self._wake.set()

    def cancel_agent(self, index: int) -> None:
        agent = self.agents[index]
        if agent.final:
            return
        agent.cancel_requested = True
        if agent.state == QUEUED:
            self._finish_cancelled(agent)  # lazily skipped when popped from the queue
        elif agent.state == RETRYING:
            # a timer handle: uvloop's is not an asyncio.TimerHandle (an isinstance check
            # left its retry timer armed; it fired after the cancel, counted the wait off
            # twice, and a cancelled console run never ended)
            if agent.handle is not None and not isinstance(agent.handle, asyncio.Task):
                agent.handle.cancel()
            self.retry_waiting -= 1
            self._finish_cancelled(agent)
        elif isinstance(agent.handle, asyncio.Task):
            agent.handle.cancel()
        self._wake.set()

    # -- the run ------------------------------------------------------------------------------
    async def run(self) -> None:
        self.t0 = time.perf_counter()
        self.started_wall = time.time()
        for agent in self.agents:
            agent.ready_at = self.t0
            self._pending.append(agent)
            self.emit(ev.QUEUED, agent)
        self.emit(ev.RUN_STARTED)
        self.loop_lag.start()
        try:
            await self._dispatch()
        finally:
            self.loop_lag.stop()
            if self.in_flight or self.retry_waiting:  # we were cancelled from outside
                self.cancel()
                tasks = [a.handle for a in self.agents if isinstance(a.handle, asyncio.Task)]
                await asyncio.gather(*tasks, return_exceptions=True)
            self.wall_ms = self.now_ms()
            self.emit(ev.RUN_FINISHED)

    async def _dispatch(self) -> None:
        while True:
            while (not self.paused and not self.cancelled and not self.stop_reason
                   and not self.holds and self.in_flight < self.limit):
                if self._paced():
                    break
                agent = self._next_ready()
                if agent is None:
                    break
                if self.policy.budget_usd is not None and self._over_budget(agent):
                    self._retry_ready.appendleft(agent)
                    break
                if self.send_permit is not None and (why := self.send_permit()) is not None:
                    self._retry_ready.appendleft(agent)
                    self.hold(PERMIT_HOLD, why)  # released by whoever renews the permit
                    break
                self._launch(agent)
            if not (self.in_flight or self.retry_waiting or self._pending or self._retry_ready
                    or self._unparked or self.feeding
                    or any(r or f for r, f in self._parked.values())):
                return
            if (self.cancelled or self.stop_reason) and not (self.in_flight or self.retry_waiting):
                return
            self._wake.clear()
            await self._wake.wait()

    def _paced(self) -> bool:
        """True when the pace allows no send yet (a timer wakes dispatch then). Up to 50 ms
        of lateness is made up (timers fire late; without it 80/s ran at 72/s), more is
        forgiven so a stall never turns into a burst."""
        rate = self.policy.max_calls_per_s
        if not rate:
            return False
        if not (self._retry_ready or self._pending or self._unparked):
            return False
        now = time.perf_counter()
        if now < self._next_send:
            if self._pace_timer is None:
                self._pace_timer = asyncio.get_running_loop().call_later(
                    self._next_send - now, self._pace_due)
            return True
        self._next_send = max(self._next_send, now - max(1.0 / rate, 0.05)) + 1.0 / rate
        return False

    def _pace_due(self) -> None:
        self._pace_timer = None
        self._wake.set()

    def _next_ready(self) -> TaskRecord | None:
        while self._retry_ready:
            agent = self._retry_ready.popleft()
            if agent.state == QUEUED:
                return agent
        while self._unparked or self._pending:
            if self._unparked and (not self._pending
                                   or self._unparked[0][0] < self._pending[0].index):
                agent = heapq.heappop(self._unparked)[1]
            else:
                agent = self._pending.popleft()
            if agent.state == QUEUED:
                return agent
        return None

    def _launch(self, agent: TaskRecord) -> None:
        """Send the agent's next attempt — or, when none of its gateway's keys is usable,
        park it until the first one cools down (or fail it if none ever will)."""
        if agent.route_version != self.router.version and not agent.attempts:
            self._route(agent)
        gw = self.gateways[agent.gateway]
        slot = gw.pick_key(agent.model)
        if slot is None:
            self._no_key(agent, gw)
            return
        agent.state = RUNNING
        self.in_flight_est_usd += agent.budget_est
        agent.key_fp = slot.fingerprint
        agent.live_chars = 0
        self.in_flight += 1
        now = time.perf_counter()
        attempt = Attempt(
            number=agent.prior_attempts + agent.sent + 1, model=agent.model,
            gateway=gw.name, key_fp=slot.fingerprint, started_ms=(now - self.t0) * 1000.0,
            queue_ms=(now - agent.ready_at) * 1000.0,
        )
        agent.attempts.append(attempt)
        agent.attempts_on_model += 1
        agent.queue_ms += attempt.queue_ms
        task = asyncio.create_task(self._attempt(agent, attempt, gw, slot))
        task.add_done_callback(lambda _t: self._attempt_done(agent, attempt, gw, slot))
        agent.handle = task
        self.emit(ev.STARTED, agent, attempt)

    def _attempt_done(self, agent: TaskRecord, attempt: Attempt, gw: GatewayClient,
                      slot: KeySlot) -> None:
        """A task cancelled before its first step never runs its body: release its slot
        and key here so the run cannot wait forever for it."""
        if attempt.outcome != AttemptOutcome.RUNNING:
            return
        gw.release(slot, attempt.model)
        self.in_flight -= 1
        self._settle_estimate(agent)
        attempt.outcome = AttemptOutcome.CANCELLED
        self._finish_cancelled(agent)
        self._wake.set()

    def _no_key(self, agent: TaskRecord, gw: GatewayClient) -> None:
        """No key may take this model's call now: park the task until one may (or, with
        every key disabled or retired, until an operator adds or enables one)."""
        key = (gw.name, agent.model)
        retries, fresh = self._parked.setdefault(key, (deque(), deque()))
        (retries if agent.attempts else fresh).append(agent)
        if key not in self._park_timers:
            self._arm(key)

    def _arm(self, key: tuple[str, str]) -> None:
        pool = self.gateways[key[0]].pool
        wait = pool.next_ready_in(key[1])
        if wait is None:  # nothing comes back by itself: wake() on a key operation
            return
        stuck = pool.stuck_for(key[1])
        if stuck:  # look again when the tasks would give up on this model
            wait = min(wait, self.policy.retry.rate_limit_max_wait_s - stuck + 0.01)
        self._park_timers[key] = asyncio.get_running_loop().call_later(
            max(0.002, wait), self._unpark, key)

    def _unpark(self, key: tuple[str, str]) -> None:
        """As many parked tasks as the keys can take now go back ahead of the queue
        (retries first); the rest wait for the next free slot."""
        self._park_timers.pop(key, None)
        retries, fresh = self._parked.get(key, ((), ()))
        if not (retries or fresh):
            return
        pool = self.gateways[key[0]].pool
        if pool.stuck_for(key[1]) > self.policy.retry.rate_limit_max_wait_s:
            # no key has answered this model anything but 429 for that long: fall back or
            # fail now, rather than one by one at a 429-storm's pace
            for agent in [*retries, *fresh]:
                if agent.final:
                    continue
                if agent.fallbacks:
                    self._fall_back(agent, agent.attempts[-1] if agent.attempts else None,
                                    RATE_LIMITED)
                    self._retry_ready.append(agent)
                else:
                    agent.error_class = RATE_LIMITED
                    agent.error_message = (f"no key of {key[0]} took a {key[1]} call for "
                                           f"{self.policy.retry.rate_limit_max_wait_s:.0f} s "
                                           "(429s only)")
                    self._finish(agent, FAILED, ev.FAILED)
            retries.clear()  # type: ignore[union-attr]
            fresh.clear()  # type: ignore[union-attr]
            self._wake.set()
            return
        wait = pool.next_ready_in(key[1])
        if wait is None or wait > 0:
            self._arm(key)
            return
        n = max(1, pool.ready_count(key[1]))
        batch: list[TaskRecord] = []
        while retries and len(batch) < n:
            batch.append(retries.popleft())
        self._retry_ready.extendleft(reversed(batch))
        while fresh and len(batch) < n:
            agent = fresh.popleft()
            batch.append(agent)
            heapq.heappush(self._unparked, (agent.index, agent))
        if retries or fresh:  # after dispatch took this batch
            asyncio.get_running_loop().call_soon(self._rearm, key)
        self._wake.set()

    def _rearm(self, key: tuple[str, str]) -> None:
        retries, fresh = self._parked.get(key, ((), ()))
        if (retries or fresh) and key not in self._park_timers:
            self._arm(key)

    def first_token(self, agent: TaskRecord, at: float) -> None:
        self.emit(ev.FIRST_TOKEN, agent, agent.attempts[-1])

    def progress(self, agent: TaskRecord) -> None:
        self.emit(ev.PROGRESS, agent, agent.attempts[-1], str(agent.live_chars // 4))

    async def _body(self, agent: TaskRecord, attempt: Attempt) -> Task:
        """The task's prompt for this send: at hand (read ahead), or waited for — a wait
        booked as queue time, like the client's own delay before the wire."""
        body = agent.body or self.bodies.ready(agent.index, agent.seq)
        if body is None:
            t = time.perf_counter()
            body = await self.bodies.load(agent.index, agent.seq)
            waited = (time.perf_counter() - t) * 1000.0
            attempt.started_ms += waited
            attempt.queue_ms += waited
            agent.queue_ms += waited
        agent.body = body  # kept for its retries; let go of when the task is final
        return body

    async def _attempt(self, agent: TaskRecord, attempt: Attempt, gw: GatewayClient,
                       slot: KeySlot) -> None:
        try:
            try:
                task = await self._body(agent, attempt)
            except Exception as e:  # nothing was sent: cancelled, so `resume` sends it
                self._unreadable(agent, attempt, gw, slot, e)
                return
            if agent.route_version != self.router.version and len(agent.attempts) == 1:
                self._unlaunch(agent, attempt, gw, slot)  # routed before the wait
                return
            # a capped run bounds every call's output, so its ceiling is a bound
            max_tokens = task.max_tokens or (DEFAULT_OUTPUT_ESTIMATE
                                             if self.policy.budget_usd is not None else None)
            res = await gw.complete(slot, agent.model, task.messages(), max_tokens,
                                    task.temperature, agent)
        except asyncio.CancelledError:
            if attempt.outcome != AttemptOutcome.RUNNING:  # already reaped after a cancel
                raise
            self.in_flight -= 1
            self._settle_estimate(agent)
            attempt.outcome = AttemptOutcome.CANCELLED
            attempt.latency_ms = self.now_ms() - attempt.started_ms
            self._finish_cancelled(agent)
            self._wake.set()
            if not agent.cancel_requested:
                raise
            return
        if attempt.outcome != AttemptOutcome.RUNNING:  # reaped after a cancel: too late
            return
        self.in_flight -= 1
        ceiling = agent.budget_est  # what this call was allowed to cost, at most
        self._settle_estimate(agent)
        self._wake.set()
        if res.rate_note:
            self.emit(ev.CONTROL, detail=f"{gw.name} key {slot.fingerprint} {agent.model}: "
                                         f"{res.rate_note}")
        key = (gw.name, attempt.model)
        if key in self._parked:  # an answer may have freed (or told us) the next slot
            timer = self._park_timers.pop(key, None)
            if timer is not None:
                timer.cancel()
            self._unpark(key)
        if res.send_delay_ms:  # the client's own delay before the wire is queue time
            attempt.started_ms += res.send_delay_ms
            attempt.queue_ms += res.send_delay_ms
            agent.queue_ms += res.send_delay_ms
        attempt.latency_ms = res.latency_ms
        attempt.ttft_ms = res.ttft_ms
        if res.error is None:
            attempt.outcome = AttemptOutcome.OK
            attempt.tokens_in, attempt.tokens_out = res.tokens_in, res.tokens_out
            attempt.cached_in = res.cached_in
            attempt.status_code = res.status_code
            attempt.response_id, attempt.response_model = res.response_id, res.response_model
            attempt.finish_reason = res.finish_reason
            agent.latency_ms, agent.ttft_ms = res.latency_ms, res.ttft_ms
            agent.tokens_in, agent.tokens_out = res.tokens_in, res.tokens_out
            agent.cached_in, agent.usage_estimated = res.cached_in, res.usage_estimated
            agent.cost_usd = self.prices.cost(agent.model, res.tokens_in, res.tokens_out,
                                              res.cached_in)
            if agent.cost_usd is not None:
                self.spent_usd += agent.cost_usd
                if res.usage_estimated:  # the gateway said no usage: the cap counts the
                    # call at its ceiling (its real bill is unknown; never an estimate)
                    self.unmetered_usd += max(0.0, ceiling - agent.cost_usd)
                self._check_cap_passed()
                self._model_dearest[agent.model] = max(
                    agent.cost_usd, self._model_dearest.get(agent.model, 0.0))
            agent.response_text = res.text
            agent.status_code = 200
            agent.error_class = agent.error_message = None
            self._finish(agent, SUCCEEDED, ev.SUCCEEDED)
            return
        self._failed_attempt(agent, attempt, res.error)

    def _unlaunch(self, agent: TaskRecord, attempt: Attempt, gw: GatewayClient,
                  slot: KeySlot) -> None:
        """Routing moved (a canary abort, a new stage) while this task's prompt was read:
        nothing was sent, so it goes back to the head of the queue and is routed again at
        its launch — a worker sends no first call to an aborted candidate once it knows."""
        gw.release(slot, attempt.model)
        self.in_flight -= 1
        self._settle_estimate(agent)
        agent.attempts.pop()
        agent.attempts_on_model -= 1
        agent.queue_ms -= attempt.queue_ms
        attempt.outcome = AttemptOutcome.CANCELLED  # its done callback has nothing to undo
        agent.state = QUEUED
        agent.handle = None
        self._retry_ready.appendleft(agent)
        self.emit(ev.QUEUED, agent)
        self._wake.set()

    def _unreadable(self, agent: TaskRecord, attempt: Attempt, gw: GatewayClient, slot: KeySlot,
                    e: Exception) -> None:
        gw.release(slot, attempt.model)
        self.in_flight -= 1
        self._settle_estimate(agent)
        attempt.outcome = AttemptOutcome.CANCELLED
        attempt.latency_ms = 0.0
        agent.error_class, agent.error_message = "workload", f"prompt unreadable: {e}"
        self.emit(ev.CONTROL, detail=f"task {agent.id}: its prompt could not be read ({e}); "
                                     "left unsent for `resume`")
        self._finish_cancelled(agent)
        self._wake.set()

    def _failed_attempt(self, agent: TaskRecord, attempt: Attempt, err: CallError) -> None:
        attempt.outcome = AttemptOutcome.ERROR
        attempt.status_code = err.status_code
        attempt.error_class = err.error_class
        attempt.error_message = err.message
        agent.status_code, agent.error_class, agent.error_message = (
            err.status_code, err.error_class, err.message)
        agent.latency_ms, agent.ttft_ms = attempt.latency_ms, attempt.ttft_ms
        if self.cancelled or agent.cancel_requested:
            self._finish_cancelled(agent)
            return
        pool = self.gateways[agent.gateway].pool
        if err.error_class == RATE_LIMITED:
            wait, detail = self._rate_limited(agent, attempt, err, pool)
            if wait is None:
                return
        elif err.error_class == AUTH and err.status_code in (401, 403):
            # The key was refused (now disabled): not the task's fault, not one of its
            # attempts. Another key takes the call at once; with none left the task waits
            # (visibly, resumable) for an operator to enable or add one.
            agent.attempts_on_model -= 1
            wait = 0.0
            other = pool.any_usable(besides=attempt.key_fp)
            detail = (f"{err.error_class} {err.status_code} on {attempt.key_fp}: "
                      + ("other key" if other else "no usable key left, waiting"))
        elif not err.retryable:
            self._finish(agent, FAILED, ev.FAILED)
            return
        elif agent.attempts_on_model < self.policy.retry.max_attempts:
            wait = retry_wait_s(self.policy.retry, agent.attempts_on_model, err.retry_after_s,
                                self.rng)
            detail = f"{err.error_class} {err.status_code or ''}".strip()
        elif agent.fallbacks:
            wait, detail = 0.0, self._fall_back(agent, attempt, err.error_class)
        else:
            self._finish(agent, FAILED, ev.FAILED)
            return
        attempt.retry_wait_s = wait
        agent.state = RETRYING
        agent.ready_at = time.perf_counter()  # the wait counts as queue time, not latency
        self.retry_waiting += 1
        agent.handle = asyncio.get_running_loop().call_later(wait, self._retry_due, agent)
        attempt.reported = True
        self.emit(ev.RETRY_SCHEDULED, agent, attempt, detail)

    def _rate_limited(self, agent: TaskRecord, attempt: Attempt, err: CallError,
                      pool: KeyPool) -> tuple[float | None, str]:
        """A 429 is the gateway's pace, not the task's failure: it never spends one of the
        task's attempts. Another key ready for the model takes it at once; else the task
        waits (Retry-After, capped) and then for its key-model's next free slot. Only after
        `rate_limit_max_wait_s` of 429s does it fall back or fail. (None: finished.)"""
        agent.attempts_on_model -= 1
        now = time.monotonic()
        if pool.stuck_for(agent.model, now) > self.policy.retry.rate_limit_max_wait_s:
            if agent.fallbacks:
                return 0.0, self._fall_back(agent, attempt, RATE_LIMITED)
            self._finish(agent, FAILED, ev.FAILED)
            return None, ""
        if pool.any_usable(agent.model, now, besides=attempt.key_fp):
            return 0.0, f"rate_limited 429 on {attempt.key_fp}: other key"
        wait = retry_wait_s(self.policy.retry, 1, err.retry_after_s, self.rng)
        return wait, "rate_limited 429"

    def _fall_back(self, agent: TaskRecord, attempt: Attempt | None, why: str) -> str:
        previous, agent.model = agent.model, agent.fallbacks[0]
        agent.fallbacks = agent.fallbacks[1:]
        agent.attempts_on_model = 0
        detail = f"{previous} → {agent.model} after {why}"
        self.emit(ev.FALLBACK, agent, attempt, detail)
        return detail

    def _retry_due(self, agent: TaskRecord) -> None:
        if agent.state != RETRYING:  # cancelled meanwhile (which counted the wait off)
            return
        self.retry_waiting -= 1
        agent.state = QUEUED
        self._retry_ready.append(agent)
        self._wake.set()

    def _finish_cancelled(self, agent: TaskRecord) -> None:
        if not agent.final:
            self._finish(agent, CANCELLED, ev.CANCELLED)

    def _finish(self, agent: TaskRecord, state: TaskState, kind: ev.EventKind) -> None:
        agent.state = state
        agent.handle = None
        agent.body = None
        agent.finished_ms = self.now_ms()
        self.counts[state] += 1
        self.done += 1
        last = agent.attempts[-1] if agent.attempts else None
        if last is not None and last.reported:
            last = None  # booked with its retry: a cancel or failure in the wait adds none
        elif last is not None:
            last.reported = True
        self.emit(kind, agent, last)
        if not self.policy.keep_answers:
            agent.response_text = None
            agent.settle()
