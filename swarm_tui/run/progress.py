"""Headless run: progress on stderr (a bar on a TTY, plain lines otherwise), summary at the end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
from typing import TextIO

from swarm_tui.aio import cancel_and_wait
from swarm_tui.core.states import TaskState
from swarm_tui.core.terminal import draws
from swarm_tui.engine.runner import SwarmRunner


class Progress:
    """Reads runner counters periodically; never one line per event."""

    def __init__(self, runner: SwarmRunner, out: TextIO = sys.stderr, interval: float | None = None,
                 label: str = "") -> None:
        self.runner = runner
        self.out = getattr(out, "raw", out)  # its own control sequences: the bare stream
        self.tty = draws(out)  # a bar redrawn in place; else a plain line now and then
        self.interval = interval or (0.25 if self.tty else 2.0)
        self.label = label

    def line(self) -> str:
        r = self.runner
        total = len(r.records)
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
        except OSError:
            return  # the terminal or the reader is gone (a hang-up): the run goes on
        finally:
            if self.tty:
                with contextlib.suppress(OSError):
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


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


async def run_with_progress(runner: SwarmRunner, show: bool = True) -> signal.Signals | None:
    """Run to the end; SIGINT, SIGTERM and SIGHUP cancel the swarm cleanly (what was
    answered is stored, the rest stays resumable). Returns the signal that cancelled it,
    None when it ran to its end.

    A hang-up (an SSH drop under a run started without tmux) used to take SIGHUP's default,
    killing the process with answered calls not yet stored; now the terminal it lost is
    swapped for /dev/null, so the last writes — progress, the summary — cannot fail."""
    loop = asyncio.get_running_loop()
    stopped_by: signal.Signals | None = None
    ttys = terminal_fds()  # asked now: after a hang-up a terminal no longer says it is one

    def on_signal(sig: signal.Signals) -> None:
        nonlocal stopped_by
        stopped_by = stopped_by or sig
        if sig == signal.SIGHUP:
            detach_from_terminal(ttys)
        runner.cancel()

    for sig in STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig)
    progress = asyncio.create_task(Progress(runner).run()) if show else None
    try:
        await runner.run()
    finally:
        try:
            if progress is not None:
                await cancel_and_wait(progress)
        finally:
            _swap_handlers(loop, ttys)
    return stopped_by


def _swap_handlers(loop: asyncio.AbstractEventLoop, ttys: tuple[int, ...]) -> None:
    """What follows the run — the writer's last flush, the summary, the replay timeline —
    must not die of a late signal either: until the loop closes a hang-up only detaches
    and a SIGINT / SIGTERM is said and let be (a worker whose terminal hung up gets its own
    SIGHUP and then its starter's SIGTERM: the default action of the second killed it
    mid-flush, exit -15). Bounded: the store's grace, then the journal."""
    for sig in STOP_SIGNALS:  # (adding a handler replaces the one before)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            if sig == signal.SIGHUP:
                loop.add_signal_handler(sig, detach_from_terminal, ttys)
            else:
                loop.add_signal_handler(sig, _ending)


def _ending() -> None:
    with contextlib.suppress(OSError):
        print("swarm-tui: storing what was answered; it ends by itself", file=sys.stderr)


def terminal_fds() -> tuple[int, ...]:
    """Which of standard output and error are a terminal (ask before it can hang up)."""
    return tuple(fd for fd in (1, 2) if os.isatty(fd))


def detach_from_terminal(fds: tuple[int, ...]) -> None:
    """The terminal's descriptors become /dev/null (what `nohup` does up front): after a
    hang-up every write to them fails (EIO). A log file or a pipe is left as it is."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.dup2(null, fd)
    finally:
        os.close(null)
