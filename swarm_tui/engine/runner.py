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
from swarm_tui.core.fmt import class_status
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
from swarm_tui.gateway.errors import AUTH, OTHER, RATE_LIMITED, CallError
from swarm_tui.gateway.keypool import KeyPool, KeySlot
from swarm_tui.gateway.keys import redact
from swarm_tui.prices import PriceTable
from swarm_tui.settings.run_sections import RetryConfig
from swarm_tui.settings.sections import RoutingConfig
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
        self.records = [self._record(i, t.head() if isinstance(t, Task) else t)
                       for i, t in enumerate(items)]
        for rec, seq in zip(self.records, seqs or (), strict=False):
            rec.seq = seq
        for rec, prior in zip(self.records, prior_attempts or (), strict=False):
            rec.prior_attempts = prior
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
        start = len(self.records)
        new = [self._record(start + k, head) for k, head in enumerate(heads)]
        for rec, seq, prior in zip(new, seqs, prior_attempts, strict=True):
            rec.seq, rec.prior_attempts = seq, prior
        self.records.extend(new)
        if self.t0:  # running: queue them now (before the run, run() queues every agent)
            now = time.perf_counter()
            for rec in new:
                rec.ready_at = now
                self._pending.append(rec)
                self.emit(ev.QUEUED, rec)
            self._wake.set()

    @property
    def backlog(self) -> int:
        """Tasks queued here and not yet sent (what a worker leases more batches against)."""
        return len(self._pending) + len(self._unparked) + len(self._retry_ready)

    def end_feed(self) -> None:
        self.feeding = False
        self._wake.set()

    def _record(self, i: int, task: TaskHead) -> TaskRecord:
        rec = TaskRecord(i, i, task, "", "", "", (), runner=self)
        self._route(rec)
        return rec

    def _route(self, rec: TaskRecord) -> None:
        """Gateway, bucket and model for a task's first send. A canary stage change
        re-routes tasks not yet sent (a retry stays on its gateway: same user, same side)."""
        gw_name, rec.bucket = self.router.route(rec.task)
        rec.gateway = gw_name
        rec.route_version = self.router.version
        pinned = self.gateways[gw_name].pinned_model
        rec.model = choose_model(rec.task, self.policy.routing, self.policy.default_model,
                                   pinned)
        chain = self._chains.get(rec.model)
        if chain is None:
            chain = self._chains[rec.model] = fallback_chain(rec.model,
                                                               self.policy.routing)
        rec.fallbacks = chain

    # -- clock and events ------------------------------------------------------------------
    def now_ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000.0

    def emit(self, kind: ev.EventKind, rec: TaskRecord | None = None,
             attempt: Attempt | None = None, detail: str | None = None) -> None:
        event = ev.Event(kind, self.now_ms(), rec, attempt, detail)
        for consumer in self.consumers:
            try:
                consumer(event)
            except Exception as exc:  # a broken consumer must not stop the swarm
                self.consumer_errors += 1
                if self.consumer_error is None:  # the first, said once the run has ended
                    self.consumer_error = (f"{getattr(consumer, '__qualname__', consumer)}: "
                                           f"{type(exc).__name__}: {exc}")

    def note(self, detail: str) -> None:
        """A line for the run's log (the console's, the stored events), sending unchanged."""
        self.emit(ev.CONTROL, detail=detail)

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
        for rec in self.records:
            if rec.state == RETRYING:
                if rec.handle is not None and not isinstance(rec.handle, asyncio.Task):
                    rec.handle.cancel()
                rec.handle = None
                rec.state = QUEUED
                self.retry_waiting -= 1

    # -- budget -----------------------------------------------------------------------------
    def call_estimate_usd(self, rec: TaskRecord) -> float | None:
        """What the agent's next call may cost, at most: its prompt's guaranteed token
        bound (UTF-8 bytes: no script passes it) plus its max_tokens — which a capped run
        sends with every call (DEFAULT_OUTPUT_ESTIMATE when the task gives none) — at the
        model's price, or the dearest call this run has finished on the model if more.
        None: unpriced model."""
        out = rec.task.max_tokens or DEFAULT_OUTPUT_ESTIMATE
        head = rec.task
        bound = self.prices.cost(rec.model, head.prompt_bound or head.prompt_tokens, out)
        dearest = self._model_dearest.get(rec.model)
        if bound is None:
            return dearest
        return bound if dearest is None else max(bound, dearest)

    def _over_budget(self, rec: TaskRecord) -> bool:
        """True: do not send this call now. Spent + the in-flight calls' estimates + this
        call would pass the cap: wait while calls are in flight (each completion wakes
        dispatch to look again); with none in flight, stop dispatch for good."""
        cap = self.policy.budget_usd
        assert cap is not None
        est = self.call_estimate_usd(rec)
        if est is None:
            if rec.model not in self._unpriced_warned:
                self._unpriced_warned.add(rec.model)
                self.emit(ev.CONTROL, detail=f"budget: {rec.model} is unpriced; its calls "
                                             "cannot be counted against the cap")
            est = 0.0
        rec.budget_est = est
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
        unsent = sum(1 for a in self.records if a.state == QUEUED)
        self.emit(ev.CONTROL, detail=f"budget cap ${cap:.4f} reached ({spent}; the next call "
                                     f"≈ ${est:.4f}): dispatch stopped, {unsent} tasks unsent "
                                     "(resumable)")
        self._wake.set()

    def allow(self, usd: float) -> None:
        """More of a shared cap drawn for this process: the call waiting for it goes."""
        self.allowance = (self.allowance or 0.0) + usd
        self.budget_short = 0.0
        self._wake.set()

    def _settle_estimate(self, rec: TaskRecord) -> None:
        self.in_flight_est_usd -= rec.budget_est
        rec.budget_est = 0.0

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
        for rec in self.records:
            if not rec.final:
                self.cancel_agent(rec.index)
        self._wake.set()
        with contextlib.suppress(RuntimeError):  # no running loop: nothing in flight
            asyncio.get_running_loop().call_later(CANCEL_GRACE_S, self._reap_after_cancel)

    def _reap_after_cancel(self) -> None:
        """A cancelled run must end: a call whose transport swallowed the cancellation
        (seen once under heavy load: a cancelled console run stayed RUNNING for a minute)
        is booked cancelled here, and its late answer, if any, is ignored."""
        reaped = 0
        for rec in self.records:
            attempt = rec.attempts[-1] if rec.attempts else None
            if (isinstance(rec.handle, asyncio.Task) and not rec.handle.done()
                    and attempt is not None and attempt.outcome == AttemptOutcome.RUNNING):
                rec.handle.cancel()
                attempt.outcome = AttemptOutcome.CANCELLED
                attempt.latency_ms = self.now_ms() - attempt.started_ms
                self.in_flight -= 1
                self._settle_estimate(rec)
                self._finish_cancelled(rec)
                reaped += 1
        if reaped:
            self.emit(ev.CONTROL, detail=f"cancel: {reaped} calls did not stop within "
                                         f"{CANCEL_GRACE_S:.0f} s; booked cancelled")
            self._wake.set()

    def cancel_agent(self, index: int) -> None:
        rec = self.records[index]
        if rec.final:
            return
        rec.cancel_requested = True
        if rec.state == QUEUED:
            self._finish_cancelled(rec)  # lazily skipped when popped from the queue
        elif rec.state == RETRYING:
            # a timer handle: uvloop's is not an asyncio.TimerHandle (an isinstance check
            # left its retry timer armed; it fired after the cancel, counted the wait off
            # twice, and a cancelled console run never ended)
            if rec.handle is not None and not isinstance(rec.handle, asyncio.Task):
                rec.handle.cancel()
            self.retry_waiting -= 1
            self._finish_cancelled(rec)
        elif isinstance(rec.handle, asyncio.Task):
            rec.handle.cancel()
        self._wake.set()

    # -- the run ------------------------------------------------------------------------------
    async def run(self) -> None:
        self.t0 = time.perf_counter()
        self.started_wall = time.time()
        for rec in self.records:
            rec.ready_at = self.t0
            self._pending.append(rec)
            self.emit(ev.QUEUED, rec)
        self.emit(ev.RUN_STARTED)
        self.loop_lag.start()
        try:
            await self._dispatch()
        finally:
            self.loop_lag.stop()
            if self.in_flight or self.retry_waiting:  # we were cancelled from outside
                self.cancel()
                tasks = [a.handle for a in self.records if isinstance(a.handle, asyncio.Task)]
                await asyncio.gather(*tasks, return_exceptions=True)
            self.wall_ms = self.now_ms()
            self.emit(ev.RUN_FINISHED)

    async def _dispatch(self) -> None:
        while True:
            while (not self.paused and not self.cancelled and not self.stop_reason
                   and not self.holds and self.in_flight < self.limit):
                if self._paced():
                    break
                rec = self._next_ready()
                if rec is None:
                    break
                if self.policy.budget_usd is not None and self._over_budget(rec):
                    self._retry_ready.appendleft(rec)
                    break
                if self.send_permit is not None and (why := self.send_permit()) is not None:
                    self._retry_ready.appendleft(rec)
                    self.hold(PERMIT_HOLD, why)  # released by whoever renews the permit
                    break
                self._launch(rec)
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
            rec = self._retry_ready.popleft()
            if rec.state == QUEUED:
                return rec
        while self._unparked or self._pending:
            if self._unparked and (not self._pending
                                   or self._unparked[0][0] < self._pending[0].index):
                rec = heapq.heappop(self._unparked)[1]
            else:
                rec = self._pending.popleft()
            if rec.state == QUEUED:
                return rec
        return None

    def _launch(self, rec: TaskRecord) -> None:
        """Send the agent's next attempt — or, when none of its gateway's keys is usable,
        park it until the first one cools down (or fail it if none ever will)."""
        if rec.route_version != self.router.version and not rec.attempts:
            self._route(rec)
        gw = self.gateways[rec.gateway]
        # a tokens-per-minute quota admits a call at its prompt plus its max_tokens
        head = rec.task
        slot = gw.pick_key(rec.model, head.prompt_tokens + (head.max_tokens or 0))
        if slot is None:
            self._no_key(rec, gw)
            return
        rec.state = RUNNING
        self.in_flight_est_usd += rec.budget_est
        rec.key_fp = slot.fingerprint
        rec.live_chars = 0
        self.in_flight += 1
        now = time.perf_counter()
        attempt = Attempt(
            number=rec.prior_attempts + rec.sent + 1, model=rec.model,
            gateway=gw.name, key_fp=slot.fingerprint, started_ms=(now - self.t0) * 1000.0,
            queue_ms=(now - rec.ready_at) * 1000.0,
        )
        rec.attempts.append(attempt)
        rec.attempts_on_model += 1
        rec.queue_ms += attempt.queue_ms
        task = asyncio.create_task(self._attempt(rec, attempt, gw, slot))
        task.add_done_callback(lambda _t: self._attempt_done(rec, attempt, gw, slot))
        rec.handle = task
        self.emit(ev.STARTED, rec, attempt)

    def _attempt_done(self, rec: TaskRecord, attempt: Attempt, gw: GatewayClient,
                      slot: KeySlot) -> None:
        """A task cancelled before its first step never runs its body: release its slot
        and key here so the run cannot wait forever for it."""
        if attempt.outcome != AttemptOutcome.RUNNING:
            return
        gw.release(slot, attempt.model)
        self.in_flight -= 1
        self._settle_estimate(rec)
        attempt.outcome = AttemptOutcome.CANCELLED
        self._finish_cancelled(rec)
        self._wake.set()

    def _no_key(self, rec: TaskRecord, gw: GatewayClient) -> None:
        """No key may take this model's call now: park the task until one may (or, with
        every key disabled or retired, until an operator adds or enables one)."""
        key = (gw.name, rec.model)
        retries, fresh = self._parked.setdefault(key, (deque(), deque()))
        (retries if rec.attempts else fresh).append(rec)
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
            for rec in [*retries, *fresh]:
                if rec.final:
                    continue
                if rec.fallbacks:
                    self._fall_back(rec, rec.attempts[-1] if rec.attempts else None,
                                    RATE_LIMITED)
                    self._retry_ready.append(rec)
                else:
                    rec.error_class = RATE_LIMITED
                    rec.error_message = (f"no key of {key[0]} took a {key[1]} call for "
                                           f"{self.policy.retry.rate_limit_max_wait_s:.0f} s "
                                           "(429s only)")
                    self._finish(rec, FAILED, ev.FAILED)
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
            rec = fresh.popleft()
            batch.append(rec)
            heapq.heappush(self._unparked, (rec.index, rec))
        if retries or fresh:  # after dispatch took this batch
            asyncio.get_running_loop().call_soon(self._rearm, key)
        self._wake.set()

    def _rearm(self, key: tuple[str, str]) -> None:
        retries, fresh = self._parked.get(key, ((), ()))
        if (retries or fresh) and key not in self._park_timers:
            self._arm(key)

    def first_token(self, rec: TaskRecord, at: float) -> None:
        self.emit(ev.FIRST_TOKEN, rec, rec.attempts[-1])

    def progress(self, rec: TaskRecord) -> None:
        self.emit(ev.PROGRESS, rec, rec.attempts[-1], str(rec.live_chars // 4))

    async def _body(self, rec: TaskRecord, attempt: Attempt) -> Task:
        """The task's prompt for this send: at hand (read ahead), or waited for — a wait
        booked as queue time, like the client's own delay before the wire."""
        body = rec.body or self.bodies.ready(rec.index, rec.seq)
        if body is None:
            t = time.perf_counter()
            body = await self.bodies.load(rec.index, rec.seq)
            waited = (time.perf_counter() - t) * 1000.0
            attempt.started_ms += waited
            attempt.queue_ms += waited
            rec.queue_ms += waited
        rec.body = body  # kept for its retries; let go of when the task is final
        return body

    async def _attempt(self, rec: TaskRecord, attempt: Attempt, gw: GatewayClient,
                       slot: KeySlot) -> None:
        try:
            try:
                task = await self._body(rec, attempt)
            except Exception as e:  # nothing was sent: cancelled, so `resume` sends it
                self._unreadable(rec, attempt, gw, slot, e)
                return
            if rec.route_version != self.router.version and len(rec.attempts) == 1:
                self._unlaunch(rec, attempt, gw, slot)  # routed before the wait
                return
            # a capped run bounds every call's output, so its ceiling is a bound
            max_tokens = task.max_tokens or (DEFAULT_OUTPUT_ESTIMATE
                                             if self.policy.budget_usd is not None else None)
            res = await gw.complete(slot, rec.model, task.messages(), max_tokens,
                                    task.temperature, rec,
                                    self._gate(rec))
        except asyncio.CancelledError:
            if attempt.outcome != AttemptOutcome.RUNNING:  # already reaped after a cancel
                raise
            self.in_flight -= 1
            self._settle_estimate(rec)
            attempt.outcome = AttemptOutcome.CANCELLED
            attempt.latency_ms = self.now_ms() - attempt.started_ms
            self._finish_cancelled(rec)
            self._wake.set()
            if not rec.cancel_requested:
                raise
            return
        except Exception as e:  # a fault of ours around a call that may have been paid
            self._internal_fault(rec, attempt, gw, slot, e)
            return
        if attempt.outcome != AttemptOutcome.RUNNING:  # reaped after a cancel: too late
            return
        if res.held_back:  # its route or permit moved while it waited: not sent
            self._unlaunch(rec, attempt, gw, slot)
            return
        self.in_flight -= 1
        ceiling = rec.budget_est  # what this call was allowed to cost, at most
        self._settle_estimate(rec)
        self._wake.set()
        if res.rate_note:
            self.emit(ev.CONTROL, detail=f"{gw.name} key {slot.fingerprint} {rec.model}: "
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
            rec.queue_ms += res.send_delay_ms
        attempt.latency_ms = res.latency_ms
        attempt.ttft_ms = res.ttft_ms
        if res.error is None:
            attempt.outcome = AttemptOutcome.OK
            attempt.tokens_in, attempt.tokens_out = res.tokens_in, res.tokens_out
            attempt.cached_in = res.cached_in
            attempt.status_code = res.status_code
            attempt.response_id, attempt.response_model = res.response_id, res.response_model
            attempt.finish_reason = res.finish_reason
            rec.latency_ms, rec.ttft_ms = res.latency_ms, res.ttft_ms
            rec.tokens_in, rec.tokens_out = res.tokens_in, res.tokens_out
            rec.cached_in, rec.usage_estimated = res.cached_in, res.usage_estimated
            rec.cost_usd = self.prices.cost(rec.model, res.tokens_in, res.tokens_out,
                                              res.cached_in)
            if rec.cost_usd is not None:
                self.spent_usd += rec.cost_usd
                if res.usage_estimated:  # the gateway said no usage: the cap counts the
                    # call at its ceiling (its real bill is unknown; never an estimate)
                    self.unmetered_usd += max(0.0, ceiling - rec.cost_usd)
                self._check_cap_passed()
                self._model_dearest[rec.model] = max(
                    rec.cost_usd, self._model_dearest.get(rec.model, 0.0))
            rec.response_text = res.text
            rec.status_code = 200
            rec.error_class = rec.error_message = None
            self._finish(rec, SUCCEEDED, ev.SUCCEEDED)
            return
        self._failed_attempt(rec, attempt, res.error)

    def _internal_fault(self, rec: TaskRecord, attempt: Attempt, gw: GatewayClient,
                        slot: KeySlot, e: Exception) -> None:
        """An exception of ours while the call was made or its answer read (a lone
        surrogate once raised in token counting). Left to the task's done callback it
        was booked cancelled — no call on record, and `resume` sent it again, paying
        twice. It is booked failed instead, with what went wrong, never resent."""
        if attempt.outcome != AttemptOutcome.RUNNING:
            return
        gw.release(slot, attempt.model)
        self.in_flight -= 1
        self._settle_estimate(rec)
        attempt.latency_ms = self.now_ms() - attempt.started_ms
        # (redacted as a gateway's error is: an exception may quote what it was handed)
        why = redact(f"internal error around the call: {type(e).__name__}: {e}",
                     (slot.secret,))[:300]
        self.emit(ev.CONTROL, detail=f"task {rec.id}: {why}; booked failed, not resent")
        self._failed_attempt(rec, attempt, CallError(OTHER, None, why))
        self._wake.set()

    def _gate(self, rec: TaskRecord) -> Callable[[], bool] | None:
        """Asked once the call has its connection, just before it goes on the wire (it may
        have waited for one since its launch): a first call goes only while its route is
        the router's current one (a canary aborted meanwhile gets nothing), and any call
        only while the send permit holds (a worker stopped past its lease, resumed, would
        send a task another worker has taken over — paid twice). None: nothing to ask."""
        router, version, permit = self.router, rec.route_version, self.send_permit
        first = len(rec.attempts) == 1
        if permit is None:
            return (lambda: router.version == version) if first else None
        if not first:
            return lambda: permit() is None
        return lambda: router.version == version and permit() is None

    def _unlaunch(self, rec: TaskRecord, attempt: Attempt, gw: GatewayClient,
                  slot: KeySlot) -> None:
        """Routing moved (a canary abort, a new stage) or the send permit lapsed while this
        call waited (for its prompt, for a connection): nothing was sent, so it goes back to
        the head of the queue — routed again at its launch if it was its first call, held
        there while the permit is out — and a worker sends no first call to an aborted
        candidate, nor any call past its lease, once it knows."""
        gw.release(slot, attempt.model)
        self.in_flight -= 1
        self._settle_estimate(rec)
        rec.attempts.pop()
        rec.attempts_on_model -= 1
        rec.queue_ms -= attempt.queue_ms
        attempt.outcome = AttemptOutcome.CANCELLED  # its done callback has nothing to undo
        rec.state = QUEUED
        rec.handle = None
        self._retry_ready.appendleft(rec)
        self.emit(ev.QUEUED, rec)
        self._wake.set()

    def _unreadable(self, rec: TaskRecord, attempt: Attempt, gw: GatewayClient, slot: KeySlot,
                    e: Exception) -> None:
        gw.release(slot, attempt.model)
        self.in_flight -= 1
        self._settle_estimate(rec)
        attempt.outcome = AttemptOutcome.CANCELLED
        attempt.latency_ms = 0.0
        rec.error_class, rec.error_message = "workload", f"prompt unreadable: {e}"
        self.emit(ev.CONTROL, detail=f"task {rec.id}: its prompt could not be read ({e}); "
                                     "left unsent for `resume`")
        self._finish_cancelled(rec)
        self._wake.set()

    def _failed_attempt(self, rec: TaskRecord, attempt: Attempt, err: CallError) -> None:
        attempt.outcome = AttemptOutcome.ERROR
        attempt.status_code = err.status_code
        attempt.error_class = err.error_class
        attempt.error_message = err.message
        rec.status_code, rec.error_class, rec.error_message = (
            err.status_code, err.error_class, err.message)
        rec.latency_ms, rec.ttft_ms = attempt.latency_ms, attempt.ttft_ms
        if self.cancelled or rec.cancel_requested:
            self._finish_cancelled(rec)
            return
        pool = self.gateways[rec.gateway].pool
        plain = class_status(err.error_class, err.status_code)  # what the row says alone
        if err.error_class == RATE_LIMITED:
            wait, detail = self._rate_limited(rec, attempt, err, pool)
            if wait is None:
                return
        elif err.error_class == AUTH and err.status_code in (401, 403):
            # The key was refused (now disabled): not the task's fault, not one of its
            # attempts. Another key takes the call at once; with none left the task waits
            # (visibly, resumable) for an operator to enable or add one.
            rec.attempts_on_model -= 1
            wait = 0.0
            other = pool.any_usable(besides=attempt.key_fp)
            detail = (f"{err.error_class} {err.status_code} on {attempt.key_fp}: "
                      + ("other key" if other else "no usable key left, waiting"))
        elif not err.retryable:
            self._finish(rec, FAILED, ev.FAILED)
            return
        elif rec.attempts_on_model < self.policy.retry.max_attempts:
            wait = retry_wait_s(self.policy.retry, rec.attempts_on_model, err.retry_after_s,
                                self.rng)
            detail = plain
        elif rec.fallbacks:
            wait, detail = 0.0, self._fall_back(rec, attempt, err.error_class)
        else:
            self._finish(rec, FAILED, ev.FAILED)
            return
        attempt.retry_wait_s = wait
        if detail != plain:  # the engine did something the row alone does not say
            attempt.retry_detail = detail
        rec.state = RETRYING
        rec.ready_at = time.perf_counter()  # the wait counts as queue time, not latency
        self.retry_waiting += 1
        rec.handle = asyncio.get_running_loop().call_later(wait, self._retry_due, rec)
        attempt.reported = True
        self.emit(ev.RETRY_SCHEDULED, rec, attempt, detail)

    def _rate_limited(self, rec: TaskRecord, attempt: Attempt, err: CallError,
                      pool: KeyPool) -> tuple[float | None, str]:
        """A 429 is the gateway's pace, not the task's failure: it never spends one of the
        task's attempts. Another key ready for the model takes it at once; else the task
        waits (Retry-After, capped) and then for its key-model's next free slot. Only after
        `rate_limit_max_wait_s` of 429s does it fall back or fail. (None: finished.)"""
        rec.attempts_on_model -= 1
        now = time.monotonic()
        if pool.stuck_for(rec.model, now) > self.policy.retry.rate_limit_max_wait_s:
            if rec.fallbacks:
                return 0.0, self._fall_back(rec, attempt, RATE_LIMITED)
            self._finish(rec, FAILED, ev.FAILED)
            return None, ""
        if pool.any_usable(rec.model, now, besides=attempt.key_fp):
            return 0.0, f"rate_limited 429 on {attempt.key_fp}: other key"
        wait = retry_wait_s(self.policy.retry, 1, err.retry_after_s, self.rng)
        return wait, "rate_limited 429"

    def _fall_back(self, rec: TaskRecord, attempt: Attempt | None, why: str) -> str:
        previous, rec.model = rec.model, rec.fallbacks[0]
        rec.fallbacks = rec.fallbacks[1:]
        rec.attempts_on_model = 0
        detail = f"{previous} → {rec.model} after {why}"
        self.emit(ev.FALLBACK, rec, attempt, detail)
        return detail

    def _retry_due(self, rec: TaskRecord) -> None:
        if rec.state != RETRYING:  # cancelled meanwhile (which counted the wait off)
            return
        self.retry_waiting -= 1
        rec.state = QUEUED
        self._retry_ready.append(rec)
        self._wake.set()

    def _finish_cancelled(self, rec: TaskRecord) -> None:
        if not rec.final:
            self._finish(rec, CANCELLED, ev.CANCELLED)

    def _finish(self, rec: TaskRecord, state: TaskState, kind: ev.EventKind) -> None:
        rec.state = state
        rec.handle = None
        rec.body = None
        rec.finished_ms = self.now_ms()
        self.counts[state] += 1
        self.done += 1
        last = rec.attempts[-1] if rec.attempts else None
        if last is not None and last.reported:
            last = None  # booked with its retry: a cancel or failure in the wait adds none
        elif last is not None:
            last.reported = True
        self.emit(kind, rec, last)
        if not self.policy.keep_answers:
            rec.response_text = None
            rec.settle()
