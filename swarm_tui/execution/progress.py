"""Headless run: progress on stderr (a bar on a TTY, plain lines otherwise), summary at the end."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
from typing import TextIO

from swarm_tui.engine.runner import SwarmRunner
from swarm_tui.engine.state import TaskState
from swarm_tui.engine.summary import Percentiles, RunSummary
from swarm_tui.report import fmt


def cost_text(s: RunSummary) -> str:
    text = fmt.usd(s.cost_usd)
    if s.unpriced_tasks:
        text += f" + unpriced ({', '.join(s.unpriced_models)}: {s.unpriced_tasks} tasks)"
    if s.tokens.estimated_tasks:
        text += " (estimated usage)"
    return text


def _pcts(p: Percentiles, with_p99: bool = True) -> str:
    tail = f" / p99 {fmt.ms(p.p99)}" if with_p99 else ""
    return f"p50 {fmt.ms(p.p50)} / p95 {fmt.ms(p.p95)}{tail} ms"


def summary_text(s: RunSummary) -> str:
    label = "SIMULATED" if s.simulated else "LIVE"
    rate = "-" if s.success_rate is None else f"{s.success_rate:.1%}"
    mean = "" if s.latency_ms.mean is None else f" (mean {s.latency_ms.mean:,.1f})"
    lines = [
        f"{label} run {s.run_id} [{s.status}]: {s.total} agents, wall {s.wall_ms:,.0f} ms, "
        f"{s.succeeded}/{s.total} succeeded ({rate}), {s.calls:,} calls "
        f"({fmt.pct(s.call_success_rate)} ok per call), latency {_pcts(s.latency_ms)}{mean}, "
        f"TTFT {_pcts(s.ttft_ms, False)}, tokens {s.tokens.input:,} in / {s.tokens.output:,} out, "
        f"cost {cost_text(s)}",
    ]
    extra = []
    if s.failed:
        extra.append("failed: " + ", ".join(f"{k} {v}" for k, v in sorted(s.errors.items())))
    if s.cancelled:
        extra.append(f"cancelled: {s.cancelled}")
    if s.sent_twice:
        extra.append(f"SENT MORE THAN ONCE: {s.sent_twice} tasks (paid twice; "
                     "`export` flags them)")
    if s.client_bound:
        extra.append(f"CLIENT-BOUND: latency includes this process's own delay (loop lag "
                     f"p95 {fmt.ms(s.client_lag_p95_ms)} ms, max {fmt.ms(s.client_lag_max_ms)})")
    if s.queue_ms.p95 is not None:
        extra.append(f"queue (not latency) {_pcts(s.queue_ms, False)}")
    for model, m in s.by_model.items():
        cost = "unpriced" if m.unpriced_tasks and not m.cost_usd else (
            fmt.usd(m.cost_usd) + (f" + {m.unpriced_tasks} unpriced" if m.unpriced_tasks else ""))
        extra.append(f"{model}: {m.succeeded}/{m.total} ok, p95 {fmt.ms(m.latency_ms.p95)} ms, "
                     f"{cost}")
    if extra:
        lines.append("  " + "; ".join(extra))
    if s.sla is not None:
        verdict = ("SLA met" if s.sla.met else
                   f"SLA inconclusive, {s.sla.inconclusive}" if s.sla.inconclusive else
                   "SLA BREACHED: " + ", ".join(s.sla.breaches))
        lines.append(
            f"  {verdict} (p95 ≤ {s.sla.p95_ms:.0f} ms, {s.sla.success_basis} success "
            f"≥ {s.sla.min_success:.0%})"
        )
    return "\n".join(lines)


class Progress:
    """Reads runner counters periodically; never one line per event."""

    def __init__(self, runner: SwarmRunner, out: TextIO = sys.stderr, interval: float | None = None,
                 label: str = "") -> None:
        self.runner = runner
        self.out = out
        self.tty = out.isatty()
        self.interval = interval or (0.25 if self.tty else 2.0)
        self.label = label

    def line(self) -> str:
        r = self.runner
        total = len(r.agents)
        elapsed = max(1e-9, r.now_ms() / 1000.0)
        ended = r.counts[TaskState.SUCCEEDED] + r.counts[TaskState.FAILED]
        state = " PAUSED" if r.paused else ""
        waiting = r.waiting_for_keys
        if waiting:
            state += f" WAITING: {waiting}"
        if r.holds:
            state += " HELD: " + "; ".join(r.holds.values())
        head = f"{self.label}{r.done}/{total}"
        if self.tty:
            width = 24
            filled = int(width * r.done / total) if total else width
            head = f"{self.label}[{'#' * filled}{'.' * (width - filled)}] {r.done}/{total}"
        return (f"{head} ok {r.counts[TaskState.SUCCEEDED]} failed {r.counts[TaskState.FAILED]} "
                f"in-flight {r.in_flight} retrying {r.retry_waiting} "
                f"{ended / elapsed:,.0f} calls/s {elapsed:,.1f}s{state}")

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.interval)
                self._write()
        finally:
            if self.tty:
                self.out.write("\r\x1b[2K")
                self.out.flush()

    def _write(self) -> None:
        if self.tty:
            # one terminal line, or every update wraps into a new one (80-column bastions)
            width = shutil.get_terminal_size((80, 24)).columns - 1
            line = self.line()
            self.out.write("\r\x1b[2K" + (line if len(line) <= width else line[:width - 1]
                                            + "…"))
        else:
            self.out.write(self.line() + "\n")
        self.out.flush()


async def run_with_progress(runner: SwarmRunner, show: bool = True) -> bool:
    """Run to the end; SIGINT/SIGTERM cancel the swarm cleanly. Returns True if interrupted."""
    loop = asyncio.get_running_loop()
    interrupted = False

    def on_signal() -> None:
        nonlocal interrupted
        interrupted = True
        runner.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)
    progress = asyncio.create_task(Progress(runner).run()) if show else None
    try:
        await runner.run()
    finally:
        if progress is not None:
            progress.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await progress
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
    return interrupted
