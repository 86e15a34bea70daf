"""The engine's side of storing a run: its events turned into rows, its figures and keys
read for the heartbeat (issue 33: the store stores — rows in, rows out).

The recorder is an event consumer, called inline by the engine, so it only builds tuples
and appends them to the writer's batch (no await, no I/O); the writer (store/writer.py)
commits them and knows nothing of the engine. What the writer needs of the run at each
commit — the live figures a watcher reads, each key's state — it asks of the recorder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator, Mapping

from swarm_tui.core import events as ev
from swarm_tui.core.records import Attempt, TaskRecord
from swarm_tui.engine.control import Executor
from swarm_tui.engine.snapshot import key_rows
from swarm_tui.store.writer import StoreWriter


class Signature:
    """Who sent the command being applied, and whether the runner said what it did."""

    __slots__ = ("actor", "said")

    def __init__(self, actor: str) -> None:
        self.actor = actor
        self.said = False


class RunRecorder:
    """One runner's events into one writer's rows."""

    def __init__(self, writer: StoreWriter, runner: Executor) -> None:
        self.writer = writer
        self.runner = runner
        self.run_id = writer.run_id
        self._attempt_n = 0
        self._key_seen: dict[tuple[str, str], tuple] = {}  # each key as last committed
        self._signing: Signature | None = None  # a queued command being applied now
        # the calls in flight, for watchers' agents view (agent, run seconds at its send)
        self._working: dict[int, tuple[TaskRecord, float]] = {}
        writer.recorder = self
        runner.consumers.append(self.on_event)

    # -- the consumer: called inline by the engine, so only appends ------------------------
    def on_event(self, e: ev.Event) -> None:
        kind, w = e.kind, self.writer
        if kind in ev.FINAL_KINDS:
            rec = e.record
            assert rec is not None
            self._working.pop(rec.index, None)
            if e.attempt is not None:
                w.add("attempt", self._attempt_row(rec, e.attempt))
            w.add("result", self._task_row(rec))
        elif kind == ev.RETRY_SCHEDULED:
            assert e.record is not None and e.attempt is not None
            self._working.pop(e.record.index, None)
            w.add("attempt", self._attempt_row(e.record, e.attempt))
        elif kind == ev.STARTED:
            assert e.record is not None and e.attempt is not None
            self._working[e.record.index] = (e.record, e.attempt.started_ms / 1000.0)
            return
        elif kind == ev.QUEUED and e.record is not None:  # taken back before it was sent
            self._working.pop(e.record.index, None)
            return
        elif kind == ev.CONTROL:
            # a worker signs what it did (followed a canary move, applied a command), on the
            # clock its attempts' sent_at is read from: "sent after it saw X" is decidable;
            # a command from the control table says who sent it, on the same line
            detail = e.detail
            if self._signing is not None:
                self._signing.said = True
                detail = f"{detail} (by {self._signing.actor})"
            w.add("event", (self.run_id, self._now(), "control", w.worker or None, detail))
        elif kind == ev.FALLBACK and e.record is not None:  # for a watched/replayed log
            w.add("event", (self.run_id, self._now(), "fallback", None,
                            f"{e.record.task.id} {e.detail}"))
        else:
            return
        w.added()

    @contextlib.contextmanager
    def signed(self, actor: str) -> Iterator[Signature]:
        """While a command another process sent is applied: the runner's CONTROL lines
        carry who sent it, and `said` tells whether the runner logged anything."""
        self._signing = sig = Signature(actor)
        try:
            yield sig
        finally:
            self._signing = None

    def _task_row(self, a: TaskRecord) -> tuple:
        finished = self.runner.started_wall + (a.finished_ms or 0.0) / 1000.0
        return (self.run_id, a.seq, a.state, a.model, a.gateway, a.bucket, a.key_fp,
                a.prior_attempts + a.sent, a.tokens_in, a.tokens_out, a.cached_in,
                int(a.usage_estimated), a.cost_usd, a.latency_ms, a.ttft_ms, a.queue_ms,
                a.status_code, a.error_class, a.error_message, a.response_text, finished)

    def _attempt_row(self, a: TaskRecord, x: Attempt) -> tuple:
        sent = self.runner.started_wall + x.started_ms / 1000.0
        self._attempt_n += 1
        return (f"{self.writer.claim.token}:{self._attempt_n}", self.run_id, a.seq, x.number,
                x.model, x.gateway, x.key_fp, sent, x.queue_ms, x.latency_ms, x.ttft_ms,
                x.status_code, x.error_class, x.error_message, x.retry_wait_s, x.tokens_in,
                x.tokens_out, x.cached_in, x.outcome, x.retry_detail)

    def _now(self) -> float:
        """Wall time on the runner's clock (its attempts' sent_at), once it has started."""
        runner = self.runner
        if runner.started_wall:
            return runner.started_wall + runner.now_ms() / 1000.0
        return time.time()

    # -- what the writer asks at a commit ---------------------------------------------------
    def figures(self) -> dict:
        """The runner's live figures for watchers: in flight, concurrency, pause, and
        each call in flight — after a crash, the record of what was sent and never
        answered (lost sends)."""
        r = self.runner
        return {"in_flight": r.in_flight, "concurrency": r.limit, "paused": r.paused,
                "retrying": r.retry_waiting,
                "agents": [self._in_flight_entry(a, t) for a, t in list(self._working.values())]}

    def lag(self) -> dict:
        """The loop's lag (it moves anyway: no notification for it alone)."""
        lag = self.runner.loop_lag
        return {"lag_p95_ms": lag.recent_p95_ms(), "client_bound": lag.client_bound(),
                "canary_lag_ms": lag.judged_ms, "run_lag_p95_ms": lag.run_p95_ms(),
                "run_lag_max_ms": lag.run_max_ms()}

    def _in_flight_entry(self, a: TaskRecord, t: float) -> list:
        """[seq, state, sent (unix s), chars, model, attempt number, gateway, key, prompt
        tokens (estimated)] — store/lost_sends.py reads it after a crash."""
        x = a.attempts[-1] if a.attempts else None
        return [a.seq, a.state, round(self.runner.started_wall + t, 3), a.live_chars, a.model,
                x.number if x else None, x.gateway if x else a.gateway,
                x.key_fp if x else None, a.task.prompt_tokens]

    def key_rows(self, now: float) -> list[tuple]:
        """Every key's state for `keys list` / watch: fingerprints and counters only (a
        worker's own row of each key: its counters)."""
        return [(self.run_id, *dataclasses.astuple(k), now, self.writer.worker)
                for k in key_rows(self.runner.gateways)]

    def key_changes(self, now: float) -> tuple[list[tuple], dict[tuple[str, str], tuple]]:
        """Rows for the keys whose state moved since the last commit (a replay's keys
        panel at a moment), and what each key looks like now. A cooldown's end read again
        (its wall-clock form moves by microseconds per read) is no change."""
        rows, seen = [], {}
        for k in key_rows(self.runner.gateways):
            look = (k.label, k.source, k.state, k.reason, k.cooling_until)
            seen[(k.gateway, k.fingerprint)] = look
            last = self._key_seen.get((k.gateway, k.fingerprint))
            if last is None or last[:4] != look[:4] or abs(
                    (last[4] or 0.0) - (look[4] or 0.0)) > 0.5:
                rows.append((self.run_id, now, k.gateway, k.fingerprint, self.writer.worker,
                             *look[:3], k.cooling_until, k.reason))
            else:
                seen[(k.gateway, k.fingerprint)] = last
        return rows, seen

    def keys_committed(self, seen: Mapping[tuple[str, str], tuple]) -> None:
        """The keys as the commit just stored them: the next changes are against these."""
        self._key_seen = dict(seen)
