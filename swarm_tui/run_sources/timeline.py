"""A stored run held in time order, so a replay moves to any moment by applying the rows
between where it is and where it goes (issue 35: scrubbing).

The rows are read once per replay: each result and each answered call as a change at the
moment it happened. Moving forward applies the changes up to the new moment to the same
`LiveMetrics` a live run's events feed (engine/snapshot.py); moving back restores the last
checkpoint before the moment (a copy of the figures and of the cell list — the cells
themselves are shared, they never change) and applies forward from there. So a step costs
the rows of that step, and a jump at most one checkpoint's worth."""

from __future__ import annotations

import bisect
import copy
import gc
import sys
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from swarm_tui.engine.snapshot import LOG_LINES, AgentCell, LiveMetrics
from swarm_tui.engine.state import TaskState
from swarm_tui.store import reads

if TYPE_CHECKING:
    from swarm_tui.store.conn import StoreConnection

CHECKPOINT_EVERY = 8_000  # changes between two checkpoints (~0.8 MB each at 100,000 tasks)
RESULT, CALL = 0, 1
# a stored event's tag in the log (six columns, as the live log's) and its text when it
# carries none ("SESSIO" was a cut `session_started`)
EVENT_TAGS = {"control": "CTRL  ", "fallback": "FALLBK", "session_started": "START ",
              "control_rejected": "REFUSE"}
EVENT_TEXT = {"session_started": "an executor took the run (a new session)"}

_SCALARS = ("succeeded", "failed", "calls_ok", "calls_failed", "tokens_in", "tokens_out",
            "cost_usd", "unpriced", "estimated")


def event_line(kind: str, detail: str | None) -> str:
    return f"{EVENT_TAGS.get(kind, kind.upper()[:6]):6} {detail or EVENT_TEXT.get(kind, '')}"


def call_line(task_id: str, number: int, error_class: str | None, status: int | None,
              wait: float | None, message: str | None) -> str:
    if wait is not None:
        return f"RETRY  {task_id} #{number} {error_class} {status or ''} +{wait:.2f}s"
    return f"FAIL   {task_id} #{number} {error_class} {status or ''} {(message or '')[:60]}"


@dataclass(slots=True)
class _Checkpoint:
    pos: int                 # changes applied
    cells: list[AgentCell | None]
    counts: Counter[str]
    latency: object
    ttft: object
    hist: list[int]
    errors: Counter[str]
    per_second: list[tuple[int, int]]
    scalars: tuple


class Timeline:
    """One replayed run's changes in time order, and its figures at the current moment."""

    def __init__(self, started_at: float, tasks: list[tuple], results: list[tuple],
                 calls: list[tuple[float, bool]], lines: list[tuple[float, float, str]],
                 clock_end: float) -> None:
        self.started_at = started_at
        self.index = {seq: i for i, (seq, *_rest) in enumerate(tasks)}
        self.task_ids = [t[1] for t in tasks]
        self.buckets = [t[3] for t in tasks]
        # (time, kind, row): results at their end, calls at their answer; a result after
        # the calls it ended with (same instant: its last call is counted first)
        changes: list[tuple[float, int, Any]] = (
            [(r[13], RESULT, r) for r in results] + [(t, CALL, ok) for t, ok in calls])
        changes.sort(key=lambda c: (c[0], c[1] == RESULT))
        self.changes = changes
        self.times = [c[0] for c in changes]
        # log lines (when shown, when they happened, text), in the order the log shows
        self.lines = sorted(lines, key=lambda x: x[1])
        self.line_times = [x[1] for x in self.lines]
        self.metrics = LiveMetrics(clock=lambda: clock_end - started_at)
        queued = TaskState.QUEUED
        self.metrics.cells = [AgentCell(seq, task_id, queued, model, bucket, None, None, 0, None)
                              for seq, task_id, model, bucket in tasks]
        self.metrics.counts[queued] = len(tasks)
        self.pos = 0
        self.checkpoints = [self._save()]
        self.calls_out = CallsOut()
        self.calls_out.freeze()

    @classmethod
    async def load(cls, conn: StoreConnection, run_id: str, started_at: float,
                   clock_end: float) -> Timeline:
        tasks = await reads.task_list(conn, run_id)
        # a state, model, bucket and gateway per row, each its own string as read: one
        # string each (100,000 rows: ~20 MB less)
        intern = sys.intern
        results = [(r[0], r[1], intern(r[2]), intern(r[3]), intern(r[4]), *r[5:14],
                    intern(r[14]) if r[14] is not None else None)
                   for r in await reads.results_after(conn, run_id, 0)]
        calls, lines = [], []
        ids = {t[0]: t[1] for t in tasks}
        out = CallsOut()
        async for rows in reads.call_rows(conn, run_id):
            out.add(rows)
            for seq, n, outcome, sent_at, c, sc, wait, msg, *_rest, latency, _i, _o in rows:
                if outcome not in ("ok", "error"):
                    continue  # a cancelled call was never answered
                end = sent_at + (latency or 0.0) / 1000.0
                calls.append((end, outcome == "ok"))
                if outcome == "error":
                    lines.append((end, sent_at, call_line(ids.get(seq, f"#{seq}"), n, c, sc,
                                                          wait, msg)))
        out.freeze()
        lines += [(at, at, event_line(kind, detail))
                  for _id, at, kind, detail in await reads.events_after(conn, run_id, 0)]
        tl = cls(started_at, tasks, results, calls, lines, clock_end)
        tl.calls_out = out
        # what was read stays as long as the replay: out of the collector's walks (a full
        # collection over it paused a step by ~300 ms at 100,000 tasks)
        gc.freeze()
        return tl

    # -- moving --------------------------------------------------------------------------
    def move_to(self, at: float) -> LiveMetrics:
        """The figures and cells with every change up to `at` applied (the moment's log
        included); the caller may overlay calls in flight on a copy (`display`)."""
        target = bisect.bisect_right(self.times, at)
        k = bisect.bisect_right([c.pos for c in self.checkpoints], target) - 1
        if target < self.pos or self.checkpoints[k].pos > self.pos:
            self._restore(self.checkpoints[k])  # back, or forward past a checkpoint
        self._apply(target)
        self._log_at(at)
        return self.metrics

    def display(self) -> LiveMetrics:
        """A copy to draw a moment on: the calls out then go into its cells and slots, not
        into the timeline's own (the next move starts from the stored rows only)."""
        m = copy.copy(self.metrics)
        m.cells = list(self.metrics.cells)
        m.counts = Counter(self.metrics.counts)
        m.slot_tasks, m._slot_of, m._free_slots = [], {}, []
        m.slot_started, m.slot_chars = {}, {}
        return m

    def _apply(self, target: int) -> None:
        m, changes, start = self.metrics, self.changes, self.started_at
        index, task_ids = self.index, self.task_ids
        last_cp = self.checkpoints[-1].pos
        held: Counter[tuple[bool, int]] = Counter()  # latencies recorded once per value
        for pos in range(self.pos, target):
            at, kind, row = changes[pos]
            if kind == CALL:
                m.call_ended(row)
            else:
                (_rowid, seq, state, model, bucket, latency, ttft, t_in, t_out, cost,
                 estimated, attempts, error_class, _finished, _gw) = row
                i = index.get(seq)
                if i is not None:
                    m.put_cell(i, AgentCell(seq, task_ids[i], state, model, bucket, latency,
                                            cost, attempts, error_class))
                if state == TaskState.SUCCEEDED:
                    m.task_succeeded(latency, ttft, t_in, t_out, cost, bool(estimated),
                                     at - start, held)
                elif state == TaskState.FAILED:
                    m.task_failed(error_class, at - start)
            if pos + 1 - last_cp >= CHECKPOINT_EVERY:
                m.record_held(held)
                self.pos = pos + 1
                self.checkpoints.append(self._save())
                last_cp = pos + 1
        m.record_held(held)
        self.pos = max(self.pos, target)

    def _log_at(self, at: float) -> None:
        """The log as it read at `at`: the last lines shown by then, in the order they
        happened (a call's line shows once it was answered)."""
        shown = [x for x in self.lines[:bisect.bisect_right(self.line_times, at)]
                 if x[0] <= at]  # (happened by then, and shown by then)
        log = self.metrics.log
        log.clear()
        for _shown, happened, text in shown[-LOG_LINES:]:
            log.append(f"{happened - self.started_at:7.1f}s {text}")

    # -- checkpoints -----------------------------------------------------------------------
    def _save(self) -> _Checkpoint:
        m = self.metrics
        return _Checkpoint(self.pos, list(m.cells), Counter(m.counts), copy.deepcopy(m.latency),
                           copy.deepcopy(m.ttft), list(m.hist), Counter(m.errors),
                           list(m._per_second), tuple(getattr(m, n) for n in _SCALARS))

    def _restore(self, cp: _Checkpoint) -> None:
        m = self.metrics
        m.cells, m.counts = list(cp.cells), Counter(cp.counts)
        m.latency, m.ttft = copy.deepcopy(cp.latency), copy.deepcopy(cp.ttft)
        m.hist, m.errors = list(cp.hist), Counter(cp.errors)
        m._per_second.clear()
        m._per_second.extend(cp.per_second)
        for name, value in zip(_SCALARS, cp.scalars, strict=True):
            setattr(m, name, value)
        self.pos = cp.pos


class _KeyTrack:
    """One key's calls: sends and answers in time order, with running sums of what the
    key pool counts at an answer (429s, errors, tokens)."""

    def __init__(self) -> None:
        self.sent: list[float] = []
        self.ends: list[tuple[float, int, int, int, int]] = []  # (end, 429, error, in, out)

    def freeze(self) -> None:
        self.sent.sort()
        self.ends.sort()
        self.end_times = [e[0] for e in self.ends]
        self.sums: list[tuple[int, int, int, int]] = [(0, 0, 0, 0)]
        for _t, limited, error, t_in, t_out in self.ends:
            a, b, c, d = self.sums[-1]
            self.sums.append((a + limited, b + error, c + t_in, d + t_out))

    def at(self, t: float) -> tuple:
        calls = bisect.bisect_right(self.sent, t)
        ended = bisect.bisect_right(self.end_times, t)
        limited, errors, t_in, t_out = self.sums[ended]
        return (calls, calls - ended, limited, errors, t_in, t_out,
                self.sent[calls - 1] if calls else None)


class CallsOut:
    """Which calls were out, which tasks waited out a retry, and each key's counters, at
    any moment: from the run's calls held in memory (a replay step reads no rows)."""

    def __init__(self) -> None:
        self.by_sent: list[tuple[float, float, int, str]] = []
        self.waits: list[tuple[float, float, int]] = []  # (answered, wait over, seq)
        self.keys: dict[tuple[str, str], _KeyTrack] = {}

    def add(self, rows: list[tuple]) -> None:
        by_sent, intern = self.by_sent, sys.intern
        for (seq, _n, outcome, sent, _c, status, wait, _msg, model, gw, fp, latency, t_in,
             t_out) in rows:
            end = sent + (latency or 0.0) / 1000.0
            by_sent.append((sent, end, seq, intern(model)))
            if outcome == "error" and wait is not None:
                self.waits.append((end, end + wait, seq))
            if fp is not None:
                track = self.keys.setdefault((gw, fp), _KeyTrack())
                track.sent.append(sent)
                ok = outcome == "ok"
                track.ends.append((end, int(status == 429), int(outcome == "error"),
                                   t_in if ok else 0, t_out if ok else 0))
    def freeze(self) -> None:
        """Once every call was added: in time order, for the moments' lookups."""
        self.by_sent.sort()
        self.sent_times = [c[0] for c in self.by_sent]
        self.longest = max((c[1] - c[0] for c in self.by_sent), default=0.0)
        for track in self.keys.values():
            track.freeze()

    def out_at(self, t: float) -> list[tuple[int, str, float]]:
        """(seq, model, sent) of the calls sent by `t` and answered after it."""
        hi = bisect.bisect_right(self.sent_times, t)
        lo = bisect.bisect_left(self.sent_times, t - self.longest)
        return [(seq, model, sent) for sent, end, seq, model in self.by_sent[lo:hi] if end > t]

    def waiting_at(self, t: float) -> list[int]:
        return [seq for end, over, seq in self.waits if end <= t < over]

    def key_counts(self, t: float) -> dict[tuple[str, str], tuple]:
        return {key: track.at(t) for key, track in self.keys.items()}
