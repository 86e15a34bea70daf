"""`run --workers N` on this host: the run stored split into batches, N worker processes
started, and the starter and its workers one unit — a signal to the starter reaches every
worker (each cancels cleanly, its tasks resumable) and the starter waits for them (a SIGINT
to the starter alone once exited it and left the workers running)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys

from swarm_tui.core.states import RunStatus
from swarm_tui.core.summary import RunSummary
from swarm_tui.errors import (
    EXIT_BUDGET_STOPPED,
    EXIT_HANGUP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SLA_BREACHED,
)
from swarm_tui.report.history import load_summary
from swarm_tui.run.progress import STOP_SIGNALS, detach_from_terminal, terminal_fds
from swarm_tui.run.stored_run import Outcome
from swarm_tui.run.wiring import RunOptions
from swarm_tui.run.workers import prepare
from swarm_tui.settings.loader import LoadedConfig
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.reconcile import import_worker_journals
from swarm_tui.store.retry import retrying
from swarm_tui.store.runs import get_run
from swarm_tui.store.target import DbTarget
from swarm_tui.workload import Workload


async def run_with_workers(conn: StoreConnection, path: DbTarget, cfg: LoadedConfig,
                           opts: RunOptions, tasks: Workload, run_id: str, workers: int,
                           flags: list[str], *, show_progress: bool) -> Outcome:
    """Store the run split into batches, start `workers` processes of `swarm-tui worker
    RUN_ID FLAGS…` on this host, wait for them, and read the run back."""
    for warning in cfg.settings.alerts.unreachable_receivers():  # once, not per worker
        print(f"swarm-tui: warning: {warning}", file=sys.stderr)
    batches = await prepare(conn, path, cfg, opts, tasks, run_id, workers)
    if show_progress:
        print(f"swarm-tui: run {run_id}: {len(tasks)} tasks in {batches} batches, "
              f"{workers} workers", file=sys.stderr)
    argv = [sys.executable, "-m", "swarm_tui", "worker", run_id, *flags]
    procs = [await asyncio.create_subprocess_exec(*argv, stdin=subprocess.DEVNULL,
                                                  stdout=subprocess.DEVNULL)
             for _ in range(workers)]
    # the starter and its workers are one unit: a signal to the starter reaches every
    # worker (each cancels cleanly, its tasks resumable) and the starter waits for them
    # (a SIGINT to the starter alone exited it and left both workers running)
    signalled = _forward_signals(procs)
    try:
        codes = [await p.wait() for p in procs]
    finally:
        signalled.close()

    async def read_back() -> RunSummary:
        for warning in await import_worker_journals(conn, path, run_id):
            print(f"swarm-tui: warning: {warning}", file=sys.stderr)
        return await load_summary(conn, await get_run(conn, run_id, path))

    # the run is done; a store restarting right now is waited for, for the store's grace
    summary = await retrying(read_back, cfg.settings.store.unwritable_grace_s)
    # a worker stopped by the signal the starter got (or its terminal's, which reaches the
    # whole process group) ended as it was told: no failure
    stopped = (EXIT_INTERRUPTED, EXIT_HANGUP) if signalled.got else ()
    failed = [c for c in codes
              if c not in (EXIT_OK, EXIT_SLA_BREACHED, EXIT_BUDGET_STOPPED, *stopped)]
    if failed:
        # (the others may have finished the run: then there is nothing left to finish)
        then = ("the others finished the run" if summary.status == RunStatus.FINISHED
                else f"`swarm-tui worker {run_id}` finishes the run")
        print(f"swarm-tui: {len(failed)} of {workers} workers failed (exit "
              f"{', '.join(map(str, failed))}); {then}", file=sys.stderr)
    # a worker that died is no failure of a run the others finished (its batches were
    # leased again): exit as the run ended
    interrupted = (bool(failed) or signalled.got) and summary.status != RunStatus.FINISHED
    return Outcome(summary, interrupted, interrupted and signalled.first == signal.SIGHUP)


class _Forwarded:
    """Signal handlers that pass SIGINT / SIGTERM / SIGHUP on to worker processes."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.first: int | None = None  # the first signal passed on

    @property
    def got(self) -> bool:
        return self.first is not None

    def close(self) -> None:
        for sig in STOP_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                self.loop.remove_signal_handler(sig)


def _forward_signals(procs: list[asyncio.subprocess.Process]) -> _Forwarded:
    loop = asyncio.get_running_loop()
    fwd = _Forwarded(loop)
    ttys = terminal_fds()

    def forward(sig: int) -> None:
        fwd.first = fwd.first or sig
        if sig == signal.SIGHUP:
            detach_from_terminal(ttys)  # its last lines must not fail on the lost terminal
        # a hang-up ends a worker as a SIGTERM does (its default would kill it mid-write)
        to = signal.SIGTERM if sig == signal.SIGHUP else sig
        for p in procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(to)

    for sig in STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, forward, sig)
    return fwd
