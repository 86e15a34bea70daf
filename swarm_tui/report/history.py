"""`runs`, `report`, `export`: reading stored runs (safe while another process writes)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import aclosing
from typing import IO, Any

from swarm_tui.core.plain import build
from swarm_tui.core.summary import RunSummary
from swarm_tui.errors import UserError
from swarm_tui.store import reads
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.lost_sends import lost_sends
from swarm_tui.store.reads import live_figures
from swarm_tui.store.runs import (
    ENDED,
    RunRecord,
    task_rows,
    tasks_sent_twice,
    wall_ms_so_far,
)


async def load_summary(conn: StoreConnection, run: RunRecord) -> RunSummary:
    """The run's summary computed from its stored rows (what `report` prints): the
    engine's builder over the rows the store hands back (the store keeps rows; building
    the summary is not its job)."""
    from swarm_tui.core.summary import SummaryBuilder

    builder = SummaryBuilder()
    async for rows in task_rows(conn, run.id):
        for row in rows:
            builder.add(row)
    live = await live_figures(conn, run.id)  # the executor's last heartbeat
    lag = (live.get("run_lag_p95_ms"), live.get("run_lag_max_ms"))
    wall_ms = await wall_ms_so_far(conn, run)  # an interrupted run's too
    summary = builder.summary(run_id=run.id, sla=run.sla, wall_ms=wall_ms, name=run.name,
                              client_lag=lag, status=run.effective_status(),
                              simulated=run.simulated, started_at=run.started_at)
    summary.sent_twice = len(await tasks_sent_twice(conn, run.id))
    summary.sent_lost, summary.sent_lost_tokens_in = await lost_sends(conn, run.id)
    return summary


async def run_summary(conn: StoreConnection, run: RunRecord) -> RunSummary:
    """An ended run's stored summary; a live or interrupted one computed from its rows."""
    if run.summary is not None and run.effective_status() in ENDED:
        return build(RunSummary, run.summary)
    return await load_summary(conn, run)


# -- compare ----------------------------------------------------------------------------------
def _change(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a == 0:
        return None
    return (b - a) / a * 100.0


def _pct100(rate: float | None) -> float | None:
    return None if rate is None else rate * 100


def compare_rows(a: RunSummary, b: RunSummary) -> list[dict[str, Any]]:
    """The team's before/after table: A is before, B after; change is B relative to A —
    for a rate (a percentage) in percentage points (`change_pp`), as a rate's change is
    read (92.38 → 93.90 % is +1.52 pp, not "+1.6 %")."""
    def row(metric: str, va: float | None, vb: float | None, unit: str) -> dict[str, Any]:
        if unit == "%":
            pp = None if va is None or vb is None else vb - va
            return {"metric": metric, "a": va, "b": vb, "unit": unit, "change_pct": None,
                    "change_pp": pp}
        return {"metric": metric, "a": va, "b": vb, "unit": unit, "change_pct": _change(va, vb)}

    rate_a = None if a.success_rate is None else a.success_rate * 100
    rate_b = None if b.success_rate is None else b.success_rate * 100
    return [
        row("latency p50", a.latency_ms.p50, b.latency_ms.p50, "ms"),
        row("latency p95", a.latency_ms.p95, b.latency_ms.p95, "ms"),
        row("latency p99", a.latency_ms.p99, b.latency_ms.p99, "ms"),
        row("TTFT p95", a.ttft_ms.p95, b.ttft_ms.p95, "ms"),
        row("success rate", rate_a, rate_b, "%"),
        row("call success rate", _pct100(a.call_success_rate), _pct100(b.call_success_rate),
            "%"),
        row("tokens", a.tokens.input + a.tokens.output, b.tokens.input + b.tokens.output, ""),
        row("cost", a.cost_usd, b.cost_usd, "$"),
        row("cost per task", a.cost_per_task_usd, b.cost_per_task_usd, "$"),
        row("tasks", a.total, b.total, ""),
    ]


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "$":
        return f"${v:,.4f}"
    if unit == "%":
        return f"{v:.2f} %"
    if unit == "ms":
        return f"{v:,.0f} ms"
    return f"{v:,.0f}"


def compare_table(a: RunSummary, b: RunSummary) -> str:
    lines = [f"{'metric':<15} {a.run_id:>22} {b.run_id:>22} {'change':>9}"]
    for r in compare_rows(a, b):
        if r["unit"] == "%":
            ch = "-" if r["change_pp"] is None else f"{r['change_pp']:+.2f} pp"
        else:
            ch = "-" if r["change_pct"] is None else f"{r['change_pct']:+.1f}%"
        lines.append(f"{r['metric']:<15} {_fmt(r['a'], r['unit']):>22} "
                     f"{_fmt(r['b'], r['unit']):>22} {ch:>9}")
    for s in (a, b):
        if s.unpriced_tasks:
            lines.append(f"note: {s.run_id} has {s.unpriced_tasks} unpriced tasks "
                         f"({', '.join(s.unpriced_models)}), not in its cost")
    if a.simulated or b.simulated:
        lines.append("note: SIMULATED data in this comparison")
    return "\n".join(lines)


# -- export -----------------------------------------------------------------------------------
_TASK_COLS = ("seq", "task_id", "state", "model", "gateway", "bucket", "key_fp", "attempts",
              "tokens_in", "tokens_out", "cached_in", "usage_estimated", "cost_usd",
              "latency_ms", "ttft_ms", "queue_ms", "status_code", "error_class", "error_message",
              "finished_at", "response_text")
# what was asked, as the workload line gave it (the export alone re-derives a bucket)
_INPUT_COLS = ("user_id", "model", "max_tokens", "temperature", "metadata", "system", "prompt")
_ATTEMPT_COLS = ("number", "model", "gateway", "key_fp", "sent_at", "queue_ms", "latency_ms",
                 "ttft_ms", "status_code", "error_class", "error_message", "retry_wait_s",
                 "retry_detail", "tokens_in", "tokens_out", "cached_in", "outcome", "id")


async def export_run(conn: StoreConnection, run: RunRecord, fmt: str, out: IO[str]) -> int:
    """JSONL: one task per line with its attempts nested. CSV: one row per attempt, with its
    task's columns (a task never sent gets one row with empty attempt columns)."""
    attempts: dict[int, list[dict[str, Any]]] = {}
    async with aclosing(reads.attempt_dicts(conn, run.id, _ATTEMPT_COLS)) as rows:
        async for seq, a in rows:
            attempts.setdefault(seq, []).append(a)
    twice = await tasks_sent_twice(conn, run.id)
    writer = None
    if fmt == "csv":
        import csv  # here: `report` needs no CSV

        writer = csv.writer(out)
        writer.writerow(["run_id", *_TASK_COLS, "sent_twice",
                         *(f"input_{c}" for c in _INPUT_COLS),
                         *(f"attempt_{c}" for c in _ATTEMPT_COLS)])
    n = 0
    # closed here, while the connection is open: a reader that leaves (`| head`) ends the
    # loop with BrokenPipeError, and a generator finalised later printed a traceback
    async with aclosing(reads.task_dicts(conn, run.id, _TASK_COLS)) as tasks:
        async for task, asked in tasks:
            task["sent_twice"] = task["seq"] in twice
            tries = attempts.get(task["seq"], [])
            n += 1
            if writer is None:
                out.write(json.dumps({"run_id": run.id, **task, "input": asked,
                                      "attempts": tries}) + "\n")
                continue
            inputs = [json.dumps(v) if isinstance(v, dict) else v
                      for v in (asked.get(k) for k in _INPUT_COLS)]
            for a in tries or [dict.fromkeys(_ATTEMPT_COLS)]:
                writer.writerow([run.id, *task.values(), *inputs, *a.values()])
    return n


def open_out(path: str | None) -> tuple[IO[str], bool]:
    """A file to write an export or a screenshot to, 0600 (prompts and answers are the
    operator's, like the database). In a shared folder (`/tmp`) another user may have put
    a file or a link at that name first: a file or link of theirs is refused, not
    truncated and filled with our data (the kernel's protected_regular / protected_symlinks,
    for hosts that have them off)."""
    if path is None or path == "-":
        return sys.stdout, False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        link = os.lstat(path)  # a link: followed only when it is ours (/dev/stdout is)
        if link.st_uid not in (os.getuid(), 0):
            raise OSError(errno.EPERM, f"a link owned by uid {link.st_uid}") from None
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):  # a device or a pipe (/dev/stdout, a fifo) as it is
            if st.st_uid != os.getuid():
                raise OSError(errno.EPERM, f"a file owned by uid {st.st_uid}")
            os.fchmod(fd, 0o600)
            os.ftruncate(fd, 0)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "w", encoding="utf-8", newline=""), True


@contextlib.contextmanager
def written_to(path: str, place: str) -> Iterator[IO[str]]:
    """A file to write (0600; `-`: standard output). A write that fails — a full disk,
    a quota — is one line naming `place`, and a regular file left half written is
    removed: a truncated export or SVG must not pass for a whole one."""
    try:
        out, close = open_out(path)
    except OSError as e:
        raise UserError(f"{place} {path}: cannot write ({e.strerror})") from None
    if not close:
        yield out
        return
    try:
        with out:
            yield out
    except BrokenPipeError:  # `--out /dev/stdout | head`: the reader left, as on stdout
        raise
    except OSError as e:
        if os.path.isfile(path):
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise UserError(f"{place} {path}: cannot write ({e.strerror}); "
                        "nothing was left there") from None
