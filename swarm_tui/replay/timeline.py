"""A stored run held in time order, so a replay moves to any moment by applying the rows
between where it is and where it goes (issue 35: scrubbing).

Each result and each answered call is a change at the moment it happened, kept as
columns (arrays and lists, not a tuple per row). The figures (latency sketches, counters,
the sparkline's seconds) move forward by applying changes to the same `LiveMetrics` a
live run's events feed (engine/snapshot.py), and back by restoring the last checkpoint of
the figures before the moment. The grid's cells move on their own: a task's cell is its
final cell once its result's change is applied, its queued cell before — so a step sets
the cells of the results it crosses, either way, and a jump picks each task's cell anew.

A finished run's timeline is stored once, whole (store/replay_index.py: its columns and
every checkpoint's figures in one blob), so opening any moment of it reads one row
instead of every result and call: `Timeline.load` takes the stored one when it is still
the run's, and otherwise builds it from the rows (and stores it, for a finished run)."""

from __future__ import annotations

import bisect
import contextlib
import copy
import gc
import itertools
import json
import operator
import sys
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hdrh.histogram import HdrHistogram

from swarm_tui.core.fmt import class_status
from swarm_tui.core.states import TaskState
from swarm_tui.engine.snapshot import LOG_LINES, LiveMetrics, TaskCell
from swarm_tui.store import reads, replay_index

if TYPE_CHECKING:
    from swarm_tui.store.conn import StoreConnection

CHECKPOINT_EVERY = 4_000  # changes between two checkpoints of the figures
RESULT, CALL = 0, 1
FORMAT = 4  # the stored timeline's layout (a blob of another layout is built again;
# 3: histograms of three significant figures; 4: integer columns in their narrowest type)
# a stored event's tag in the log (six columns, as the live log's) and its text when it
# carries none ("SESSIO" was a cut `session_started`)
EVENT_TAGS = {"control": "CTRL  ", "fallback": "FALLBK", "session_started": "START ",
              "control_rejected": "REFUSE"}
EVENT_TEXT = {"session_started": "an executor took the run (a new session)"}

_SCALARS = ("succeeded", "failed", "calls_ok", "calls_failed", "tokens_in", "tokens_out",
            "cost_usd", "unpriced", "estimated")
_STATE = operator.attrgetter("state")
_NAN = float("nan")


def event_line(kind: str, detail: str | None) -> str:
    return f"{EVENT_TAGS.get(kind, kind.upper()[:6]):6} {detail or EVENT_TEXT.get(kind, '')}"


def call_line(task_id: str, number: int, error_class: str | None, status: int | None,
              wait: float | None, message: str | None, detail: str | None = None) -> str:
    """A failed call's log line as the live log wrote it (engine/snapshot.py): a retry's
    detail is its class and status unless the row kept what the engine did instead."""
    if wait is not None:
        what = detail or class_status(error_class, status)
        return f"RETRY  {task_id} #{number} {what} +{wait:.2f}s"
    return f"FAIL   {task_id} #{number} {error_class} {status or ''} {(message or '')[:60]}"


@dataclass(slots=True)
class _Figures:
    """The figures after `pos` changes (the cells are not in it: they move on their own).
    A stored checkpoint keeps its histograms encoded until it is restored: a seek restores
    one of a 100,000-task run's ~50 (decoding all took ~12 ms of every opening)."""

    pos: int
    latency: HdrHistogram | str
    ttft: HdrHistogram | str
    hist: list[int]
    errors: Counter[str]
    per_second: list[tuple[int, int]]
    scalars: tuple

    def to_json(self) -> dict:
        return {"pos": self.pos, "latency": _encoded(self.latency),
                "ttft": _encoded(self.ttft), "hist": self.hist,
                "errors": dict(self.errors), "per_second": self.per_second,
                "scalars": list(self.scalars)}

    @classmethod
    def from_json(cls, d: dict) -> _Figures:
        return cls(int(d["pos"]), str(d["latency"]), str(d["ttft"]),
                   [int(x) for x in d["hist"]],
                   Counter({str(k): int(v) for k, v in d["errors"].items()}),
                   [(int(s), int(n)) for s, n in d["per_second"]], tuple(d["scalars"]))


def _encoded(h: HdrHistogram | str) -> str:
    return h if isinstance(h, str) else h.encode().decode()


def _histogram(h: HdrHistogram | str) -> HdrHistogram:
    """A checkpoint's histogram to move on from (a copy: the checkpoint stays as it was)."""
    return HdrHistogram.decode(h.encode()) if isinstance(h, str) else copy.deepcopy(h)


class Columns:
    """One run's tasks, changes, results and answered calls as columns."""

    def __init__(self) -> None:
        # tasks, in seq order: what their queued cell shows
        self.seqs: list[int] = []
        self.task_ids: list[str] = []
        self.models0: list[str] = []
        self.buckets: list[str] = []
        # changes in time order: (time, kind, ref) — a result's ref is its number among
        # the results (in change order), a call's is 1 if it was answered ok
        self.times = array("d")
        self.kinds = bytearray()
        self.refs = array("q")
        # results, in change order
        self.r_task = array("q")  # the task's index (-1: a task not listed)
        self.r_state: list[str] = []
        self.r_model: list[str] = []
        self.r_bucket: list[str] = []
        self.r_error: list[str | None] = []
        # numbers as arrays (8 bytes a value, not a float object each: 100,000 tasks held
        # ~60 MB less while a run's end built its timeline); NaN: none stored
        self.r_latency = array("d")
        self.r_ttft = array("d")
        self.r_cost = array("d")
        self.r_tin = array("q")
        self.r_tout = array("q")
        self.r_est = array("B")
        self.r_attempts = array("q")
        # log lines (shown, happened, text), in the order they happened
        self.lines: list[tuple[float, float, str]] = []
        # each result's change, and each task's result (-1: none): result_index()
        self.r_pos: array | None = None
        self.task_r: array | None = None

    def result_index(self) -> tuple[array, array]:
        """(each result's position among the changes, each task's result or -1)."""
        if self.r_pos is None or self.task_r is None:
            r_pos = array("q", bytes(8 * len(self.r_task)))
            refs = self.refs
            for pos in itertools.compress(range(len(self.kinds)),
                                          map(operator.not_, self.kinds)):  # the results
                r_pos[refs[pos]] = pos
            task_r = array("q", [-1]) * len(self.seqs)
            for r, i in enumerate(self.r_task):
                if i >= 0:
                    task_r[i] = r
            self.r_pos, self.task_r = r_pos, task_r
        return self.r_pos, self.task_r


class Timeline:
    """One replayed run's changes in time order, and its figures at the current moment."""

    def __init__(self, started_at: float, clock_end: float, cols: Columns,
                 calls_out: CallsOut, checkpoints: list[_Figures] | None = None) -> None:
        self.started_at = started_at
        self.cols = c = cols
        self.task_ids, self.buckets = c.task_ids, c.buckets
        self._index: dict[int, int] | None = None
        self.times = c.times
        self.lines = c.lines
        self.line_times = [x[1] for x in c.lines]
        self.calls_out = calls_out
        # each task's final cell, and the change that ends it: built at the first move
        self.final: list[TaskCell | None] = []
        self.result_pos: list[int] = []
        self._queued: list[TaskCell] | None = None  # built the first time one is needed
        self.metrics = LiveMetrics(clock=lambda: clock_end - started_at)
        self.pos = 0  # changes applied to the figures
        self.cells_pos = -1  # changes applied to the cells (-1: none drawn yet)
        self.checkpoints = checkpoints or [self._save()]
        self.complete = checkpoints is not None  # every checkpoint is there (stored)

    @property
    def index(self) -> dict[int, int]:
        """seq -> the task's position (the cells' order)."""
        if self._index is None:
            self._index = {seq: i for i, seq in enumerate(self.cols.seqs)}
        return self._index

    # -- building ------------------------------------------------------------------------
    @classmethod
    async def load(cls, conn: StoreConnection, run_id: str, started_at: float,
                   clock_end: float, *, ended_at: float | None = None) -> Timeline:
        """The run's timeline: the stored one when it is still the run's (`ended_at`: the
        run has ended then), else built from the rows — and stored, for a run that ended."""
        tl = None
        if ended_at is not None:
            stored = await replay_index.read(conn, run_id, ended_at)
            if stored is not None:
                tl = _decode(stored, started_at, clock_end)
        if tl is None:
            tl = await cls.from_rows(conn, run_id, started_at, clock_end)
            if ended_at is not None:
                tl.complete_checkpoints()
                await replay_index.write(conn, run_id, ended_at, tl.encode())
        # what was read stays as long as the replay: out of the collector's walks (a full
        # collection over it paused a step by ~300 ms at 100,000 tasks)
        gc.freeze()
        return tl

    @classmethod
    async def from_rows(cls, conn: StoreConnection, run_id: str, started_at: float,
                        clock_end: float) -> Timeline:
        c = Columns()
        intern = sys.intern
        for seq, task_id, model, bucket in await reads.task_list(conn, run_id):
            c.seqs.append(seq)
            c.task_ids.append(task_id)
            c.models0.append(intern(model))
            c.buckets.append(intern(bucket))
        index = {seq: i for i, seq in enumerate(c.seqs)}
        times, kinds, refs = c.times, c.kinds, c.refs  # in the order read; sorted below
        async for rows in reads.result_rows(conn, run_id):
            # column by column, in C where it can be: a Python step per row and field took
            # ~0.9 s of a 100,000-task run's timeline (a running run's replay builds it)
            (_rowid, seq, state, model, bucket, latency, ttft, t_in, t_out, cost, est,
             attempts, error, finished, _gw) = zip(*rows, strict=True)
            first = len(c.r_task)
            times.extend(finished)
            kinds.extend(bytes([RESULT]) * len(rows))
            refs.extend(range(first, first + len(rows)))
            c.r_task.extend(map(index.get, seq, itertools.repeat(-1)))
            c.r_state.extend(map(intern, state))
            c.r_model.extend(map(intern, model))
            c.r_bucket.extend(map(intern, bucket))
            c.r_error.extend([None if e is None else intern(e) for e in error])
            c.r_latency.extend([_NAN if v is None else v for v in latency])
            c.r_ttft.extend([_NAN if v is None else v for v in ttft])
            c.r_cost.extend([_NAN if v is None else v for v in cost])
            c.r_tin.extend(t_in)
            c.r_tout.extend(t_out)
            c.r_est.extend(map(bool, est))
            c.r_attempts.extend(attempts)
        out = CallsOut()
        lines = c.lines
        async for rows in reads.call_rows(conn, run_id):
            out.add(rows)
            for (seq, n, outcome, sent_at, cls_, sc, wait, msg, detail, *_rest, latency, _i,
                 _o) in rows:
                if outcome not in ("ok", "error"):
                    continue  # a cancelled call was never answered
                end = sent_at + (latency or 0.0) / 1000.0
                times.append(end)
                kinds.append(CALL)
                refs.append(int(outcome == "ok"))
                if outcome == "error":
                    i = index.get(seq)
                    lines.append((end, sent_at, call_line(
                        c.task_ids[i] if i is not None else f"#{seq}", n, cls_, sc, wait,
                        msg, detail)))
        out.freeze()
        lines += [(at, at, event_line(kind, detail))
                  for _id, at, kind, detail in await reads.events_after(conn, run_id, 0)]
        lines.sort(key=lambda x: x[1])
        # in time order; a result after the calls it ended with (same instant: its last
        # call first); otherwise as read (two stable sorts of one permutation)
        order = sorted(range(len(times)), key=kinds.__getitem__, reverse=True)
        order.sort(key=times.__getitem__)
        c.times = array("d", map(times.__getitem__, order))
        c.kinds = bytearray(map(kinds.__getitem__, order))
        c.refs = array("q", map(refs.__getitem__, order))
        return cls(started_at, clock_end, c, out)

    def first_failed_call(self) -> float | None:
        """When the run's first failed call was answered (the first call change not ok),
        found in C: what store/moments.py would read from every call's row."""
        c = self.cols
        failed = map(operator.and_, c.kinds, map(operator.not_, c.refs))  # CALL and not ok
        pos = next(itertools.compress(range(len(c.times)), failed), None)
        return None if pos is None else c.times[pos]

    def complete_checkpoints(self) -> None:
        """Every checkpoint of the figures, to the run's end (before it is stored)."""
        if not self.complete:
            self._apply(len(self.times))
            self.complete = True

    # -- moving --------------------------------------------------------------------------
    def move_to(self, at: float) -> LiveMetrics:
        """The figures and cells with every change up to `at` applied (the moment's log
        included); the caller may overlay calls in flight on a copy (`display`)."""
        target = bisect.bisect_right(self.times, at)
        k = bisect.bisect_right([cp.pos for cp in self.checkpoints], target) - 1
        if target < self.pos or self.checkpoints[k].pos > self.pos:
            self._restore(self.checkpoints[k])  # back, or forward past a checkpoint
        self._apply(target)
        self._move_cells(target)
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
        """The figures forward to `target` changes (checkpoints saved on the way)."""
        m, c, start = self.metrics, self.cols, self.started_at
        times, kinds, refs = c.times, c.kinds, c.refs
        r_state, r_latency, r_ttft, r_tin, r_tout, r_cost, r_est, r_error = (
            c.r_state, c.r_latency, c.r_ttft, c.r_tin, c.r_tout, c.r_cost, c.r_est, c.r_error)
        last_cp = self.checkpoints[-1].pos
        held: Counter[tuple[bool, int]] = Counter()  # latencies recorded once per value
        succeeded, failed = TaskState.SUCCEEDED, TaskState.FAILED
        for pos in range(self.pos, target):
            if kinds[pos] == CALL:
                m.call_ended(bool(refs[pos]))
            else:
                r = refs[pos]
                state = r_state[r]
                if state == succeeded:
                    latency, ttft, cost = r_latency[r], r_ttft[r], r_cost[r]
                    m.task_succeeded(None if latency != latency else latency,  # NaN: none
                                     None if ttft != ttft else ttft, r_tin[r], r_tout[r],
                                     None if cost != cost else cost, bool(r_est[r]),
                                     times[pos] - start, held)
                elif state == failed:
                    m.task_failed(r_error[r], times[pos] - start)
            if pos + 1 - last_cp >= CHECKPOINT_EVERY:
                m.record_held(held)
                self.pos = pos + 1
                self.checkpoints.append(self._save())
                last_cp = pos + 1
        m.record_held(held)
        self.pos = max(self.pos, target)

    def _final_cells(self) -> None:
        """Each task's final cell and the change that ends it, made column by column in C
        (100,000 cells: a Python branch per row cost ~100 ms)."""
        c = self.cols
        r_pos, task_r = c.result_index()
        seqs, ids = c.seqs, c.task_ids
        cells: list[TaskCell | None] = list(_cells(
            list(map(seqs.__getitem__, c.r_task)), list(map(ids.__getitem__, c.r_task)),
            c.r_state, c.r_model, c.r_bucket,
            [None if v != v else v for v in c.r_latency],  # NaN: none stored
            [None if v != v else v for v in c.r_cost], c.r_attempts.tolist(), c.r_error))
        cells.append(None)  # a task without a result (its index -1): no final cell
        positions = r_pos.tolist()
        positions.append(len(c.times) + 1)  # … and no change that ends it
        self.final = list(map(cells.__getitem__, task_r))
        self.result_pos = list(map(positions.__getitem__, task_r))

    def _move_cells(self, target: int) -> None:
        """Each task's cell as of `target` changes: the results crossed set (forward) or
        taken back (backward); a long way, every cell picked anew."""
        m, c, before = self.metrics, self.cols, self.cells_pos
        if before < 0 or abs(target - before) > len(self.final) // 4:
            with _collector_off():
                if before < 0:
                    self._final_cells()
                self._cells_at(target)
        elif target > before:
            for pos in range(before, target):
                if c.kinds[pos] == RESULT:
                    i = c.r_task[c.refs[pos]]
                    if i >= 0:
                        m.put_cell(i, self.final[i])  # type: ignore[arg-type]  # has one
        else:
            with _collector_off():
                queued = self._queued_cells()
            for pos in range(target, before):
                if c.kinds[pos] == RESULT:
                    i = c.r_task[c.refs[pos]]
                    if i >= 0:
                        m.put_cell(i, queued[i])
        self.cells_pos = target

    def _cells_at(self, target: int) -> None:
        m = self.metrics
        if max(self.result_pos, default=0) < target:  # every task had ended
            cells = list(self.final)
        else:
            cells = [f if p < target else q for f, p, q in
                     zip(self.final, self.result_pos, self._queued_cells(), strict=True)]
        m.cells = cells  # (a task without a result has its queued cell)
        m.counts = Counter(map(_STATE, cells))

    def _queued_cells(self) -> list[TaskCell]:
        if self._queued is None:
            queued = TaskState.QUEUED
            c = self.cols
            none, n = itertools.repeat(None), len(c.seqs)
            self._queued = list(_cells(c.seqs, c.task_ids, itertools.repeat(queued, n),
                                       c.models0, c.buckets, none, none, itertools.repeat(0),
                                       none))
        return self._queued

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
    def _save(self) -> _Figures:
        m = self.metrics
        return _Figures(self.pos, copy.deepcopy(m.latency), copy.deepcopy(m.ttft), list(m.hist),
                        Counter(m.errors), list(m._per_second),
                        tuple(getattr(m, n) for n in _SCALARS))

    def _restore(self, cp: _Figures) -> None:
        m = self.metrics
        m.latency, m.ttft = _histogram(cp.latency), _histogram(cp.ttft)
        m.hist, m.errors = list(cp.hist), Counter(cp.errors)
        m._per_second.clear()
        m._per_second.extend(cp.per_second)
        for name, value in zip(_SCALARS, cp.scalars, strict=True):
            setattr(m, name, value)
        self.pos = cp.pos

    # -- stored ----------------------------------------------------------------------------
    def encode(self) -> bytes:
        """The whole timeline as one blob: a JSON header (names, the log, every
        checkpoint's figures) and the columns as arrays. Numbers only and text — nothing
        in it is executed when read."""
        c, out = self.cols, self.calls_out
        words = _Words()
        arrays: dict[str, array] = {
            "times": c.times, "kinds": array("B", c.kinds), "refs": c.refs,
            "r_task": c.r_task,
            "r_state": words.codes(c.r_state), "r_model": words.codes(c.r_model),
            "r_bucket": words.codes(c.r_bucket), "r_error": words.codes(c.r_error),
            "r_latency": c.r_latency, "r_ttft": c.r_ttft, "r_cost": c.r_cost,
            "r_tin": c.r_tin, "r_tout": c.r_tout, "r_est": c.r_est,
            "r_attempts": c.r_attempts,
            "r_pos": c.result_index()[0], "task_r": c.result_index()[1],
            "seqs": array("q", c.seqs), "models0": words.codes(c.models0),
            "buckets": words.codes(c.buckets),
            **out.columns(words),
        }
        arrays = {name: _narrow(a) for name, a in arrays.items()}
        header = {"format": FORMAT, "words": words.list, "task_ids": c.task_ids,
                  "lines": c.lines, "checkpoints": [cp.to_json() for cp in self.checkpoints],
                  "keys": out.key_names(), "longest": out.longest, "waits": out.waits,
                  "arrays": [(name, a.typecode, len(a)) for name, a in arrays.items()]}
        head = json.dumps(header, separators=(",", ":")).encode()
        # (the arrays joined as they are: no copy of each first)
        return b"".join([len(head).to_bytes(8, "little"), head, *arrays.values()])


async def keep_timeline(conn: StoreConnection, run_id: str, started_at: float,
                        ended_at: float) -> bool:
    """A run that has just ended: its timeline built and stored now, by the process that
    ended it, so the first replay of it (a page's link) reads one row too."""
    tl = await Timeline.from_rows(conn, run_id, started_at, ended_at)
    tl.complete_checkpoints()
    blob = tl.encode()
    del tl  # its columns let go before the write: the run's end then holds the blob alone
    return await replay_index.write(conn, run_id, ended_at, blob)


def _sound(c: Columns) -> bool:
    """Every column as long as its kind, every index inside what it points at: a blob
    that passes is safe to move through (a bad one is built again from the rows)."""
    n, r, m = len(c.seqs), len(c.r_task), len(c.times)
    if c.r_pos is None or c.task_r is None:
        return False
    lengths = ({len(c.task_ids), len(c.models0), len(c.buckets), len(c.task_r)} == {n}
               and {len(c.kinds), len(c.refs)} == {m}
               and {len(x) for x in (c.r_state, c.r_model, c.r_bucket, c.r_error, c.r_latency,
                                     c.r_ttft, c.r_cost, c.r_tin, c.r_tout, c.r_est,
                                     c.r_attempts, c.r_pos)} == {r})
    if not lengths:
        return False
    inside = (lambda a, lo, hi: not a or (min(a) >= lo and max(a) < hi))  # noqa: E731
    return (inside(c.r_task, -1, n) and inside(c.task_r, -1, r) and inside(c.r_pos, 0, m)
            and inside(c.refs, 0, max(r, 2)) and set(c.kinds) <= {RESULT, CALL})


@contextlib.contextmanager
def _collector_off() -> Iterator[None]:
    """While a jump makes every task's cell: a cell is a tuple of strings and numbers, in
    which the collector finds nothing, yet 100,000 of them made at once ran it over and
    over — ~a third of their making (a 100,000-task run's first moment: ~25 ms)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _cells(*columns: Any) -> Iterator[TaskCell]:
    """TaskCells from columns, made in C (the named tuple's own __new__ is a Python
    function: 100,000 cells took ~40 ms through it)."""
    return map(tuple.__new__, itertools.repeat(TaskCell),
               zip(*columns, strict=False))  # (a repeat() column is endless)


def _narrow(a: array) -> array:
    """An integer column in the fewest bytes its values fit: indices, counts and word codes
    are mostly small (a 100,000-task run's blob: 23 MB, a third less; read per opening)."""
    if a.typecode in "fd" or not a:
        return a
    lo, hi = min(a), max(a)
    for code in "bhiq":  # signed, narrowest first
        bits = array(code).itemsize * 8 - 1
        if -(1 << bits) <= lo and hi < (1 << bits):
            return a if code == a.typecode else array(code, a)
    return a


class _Words:
    """Repeated strings (states, models, buckets, gateways, keys) as numbers into a list."""

    def __init__(self) -> None:
        self.list: list[str | None] = [None]
        self._code: dict[str | None, int] = {None: 0}

    def codes(self, values: list[str | None] | list[str]) -> array:
        code = self._code
        for v in set(values) - code.keys():
            code[v] = len(self.list)
            self.list.append(v)
        return array("I", map(code.__getitem__, values))


def _decode(blob: bytes, started_at: float, clock_end: float) -> Timeline | None:
    """A stored timeline, or None when it is not one this version reads."""
    try:
        size = int.from_bytes(blob[:8], "little")
        header = json.loads(blob[8:8 + size])
        if header.get("format") != FORMAT:
            return None
        arrays: dict[str, array] = {}
        at = 8 + size
        for name, typecode, n in header["arrays"]:
            a = array(typecode)
            end = at + n * a.itemsize
            a.frombytes(blob[at:end])
            arrays[name] = a
            at = end
        words = [sys.intern(w) if isinstance(w, str) else None for w in header["words"]]
        word: Any = words.__getitem__  # (a stored None is only ever an error class)
        c = Columns()
        c.seqs = arrays["seqs"].tolist()
        c.task_ids = header["task_ids"]
        c.models0 = list(map(word, arrays["models0"]))
        c.buckets = list(map(word, arrays["buckets"]))
        c.times, c.kinds, c.refs = arrays["times"], bytearray(arrays["kinds"]), arrays["refs"]
        c.r_task = arrays["r_task"]
        c.r_state = list(map(word, arrays["r_state"]))
        c.r_model = list(map(word, arrays["r_model"]))
        c.r_bucket = list(map(word, arrays["r_bucket"]))
        c.r_error = list(map(word, arrays["r_error"]))
        c.r_latency, c.r_ttft, c.r_cost = (arrays["r_latency"], arrays["r_ttft"],
                                           arrays["r_cost"])
        c.r_tin, c.r_tout = arrays["r_tin"], arrays["r_tout"]
        c.r_est, c.r_attempts = arrays["r_est"], arrays["r_attempts"]
        c.r_pos, c.task_r = arrays["r_pos"], arrays["task_r"]
        c.lines = [(float(a), float(b), str(t)) for a, b, t in header["lines"]]
        out = CallsOut.from_columns(arrays, words, header)
        checkpoints = [_Figures.from_json(d) for d in header["checkpoints"]]
        if not checkpoints or at != len(blob) or not _sound(c):
            return None
        return Timeline(started_at, clock_end, c, out, checkpoints)
    except (ValueError, KeyError, TypeError, IndexError, OverflowError):
        return None  # not a timeline this version wrote: built again from the rows


class _KeyTrack:
    """One key's calls: sends and answers in time order, with running sums of what the
    key pool counts at an answer (429s, errors, tokens)."""

    def __init__(self) -> None:
        self.sent = array("d")
        self.end_times = array("d")
        self.counts = [array("q") for _ in range(4)]  # per answer: 429, error, in, out
        self.sums: list[array] = []  # the same, summed over the answers before each

    def freeze(self) -> None:
        self.sent = array("d", sorted(self.sent))
        order = sorted(range(len(self.end_times)), key=self.end_times.__getitem__)
        self.end_times = array("d", map(self.end_times.__getitem__, order))
        self.sums = []
        for counts in self.counts:
            total, sums = 0, array("q", [0])
            for j in order:
                total += counts[j]
                sums.append(total)
            self.sums.append(sums)
        self.counts = []

    def at(self, t: float) -> tuple:
        calls = bisect.bisect_right(self.sent, t)
        ended = bisect.bisect_right(self.end_times, t)
        limited, errors, t_in, t_out = (s[ended] for s in self.sums)
        return (calls, calls - ended, limited, errors, t_in, t_out,
                self.sent[calls - 1] if calls else None)


class CallsOut:
    """Which calls were out, which tasks waited out a retry, and each key's counters, at
    any moment: from the run's calls held in memory (a replay step reads no rows)."""

    def __init__(self) -> None:
        self.sent_times = array("d")
        self.ends = array("d")
        self.seqs = array("q")
        self.models: list[str] = []
        self.longest = 0.0
        self.waits: list[tuple[float, float, int]] = []  # (answered, wait over, seq)
        self.keys: dict[tuple[str, str], _KeyTrack] = {}

    def add(self, rows: list[tuple]) -> None:
        intern = sys.intern
        for (seq, _n, outcome, sent, _c, status, wait, _msg, _detail, model, gw, fp, latency,
             t_in, t_out) in rows:
            end = sent + (latency or 0.0) / 1000.0
            self.sent_times.append(sent)
            self.ends.append(end)
            self.seqs.append(seq)
            self.models.append(intern(model))
            if outcome == "error" and wait is not None:
                self.waits.append((end, end + wait, seq))
            if fp is not None:
                track = self.keys.get((gw, fp))
                if track is None:  # (not setdefault: that made a track for every call)
                    track = self.keys[(gw, fp)] = _KeyTrack()
                track.sent.append(sent)
                track.end_times.append(end)
                ok = outcome == "ok"
                limited, errors, tokens_in, tokens_out = track.counts
                limited.append(status == 429)
                errors.append(outcome == "error")
                tokens_in.append(t_in or 0 if ok else 0)
                tokens_out.append(t_out or 0 if ok else 0)

    def freeze(self) -> None:
        """Once every call was added: in time order of their sends, for the lookups."""
        sent = self.sent_times
        order = sorted(range(len(sent)), key=sent.__getitem__)
        self.sent_times = array("d", map(sent.__getitem__, order))
        self.ends = array("d", map(self.ends.__getitem__, order))
        self.seqs = array("q", map(self.seqs.__getitem__, order))
        self.models = list(map(self.models.__getitem__, order))
        self.longest = max(map(operator.sub, self.ends, self.sent_times), default=0.0)
        for track in self.keys.values():
            track.freeze()

    def out_at(self, t: float) -> list[tuple[int, str, float]]:
        """(seq, model, sent) of the calls sent by `t` and answered after it."""
        hi = bisect.bisect_right(self.sent_times, t)
        lo = bisect.bisect_left(self.sent_times, t - self.longest)
        ends, seqs, models, sent = self.ends, self.seqs, self.models, self.sent_times
        return [(seqs[j], models[j], sent[j]) for j in range(lo, hi) if ends[j] > t]

    def waiting_at(self, t: float) -> list[int]:
        return [seq for end, over, seq in self.waits if end <= t < over]

    def key_counts(self, t: float) -> dict[tuple[str, str], tuple]:
        return {key: track.at(t) for key, track in self.keys.items()}

    # -- stored ----------------------------------------------------------------------------
    def key_names(self) -> list[list[str]]:
        return [list(k) for k in self.keys]

    def columns(self, words: _Words) -> dict[str, array]:
        cols: dict[str, array] = {"c_sent": self.sent_times, "c_end": self.ends,
                                  "c_seq": self.seqs, "c_model": words.codes(self.models)}
        for n, track in enumerate(self.keys.values()):
            cols[f"k{n}_sent"] = track.sent
            cols[f"k{n}_end"] = track.end_times
            for name, s in zip(("429", "err", "in", "out"), track.sums, strict=True):
                cols[f"k{n}_{name}"] = s
        return cols

    @classmethod
    def from_columns(cls, arrays: dict[str, array], words: list[str | None],
                     header: dict[str, Any]) -> CallsOut:
        out = cls()
        out.sent_times, out.ends, out.seqs = arrays["c_sent"], arrays["c_end"], arrays["c_seq"]
        word: Any = words.__getitem__
        out.models = list(map(word, arrays["c_model"]))
        out.longest = float(header["longest"])
        out.waits = [(float(a), float(b), int(s)) for a, b, s in header["waits"]]
        for n, (gw, fp) in enumerate(header["keys"]):
            track = _KeyTrack()
            track.sent, track.end_times = arrays[f"k{n}_sent"], arrays[f"k{n}_end"]
            track.sums = [arrays[f"k{n}_{name}"] for name in ("429", "err", "in", "out")]
            track.counts = []
            out.keys[(str(gw), str(fp))] = track
        return out
