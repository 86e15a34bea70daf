"""Who executes a run: an OS lock held for the executor's lifetime plus a claim in the run's row.

The words, once: a *claim* is a process's right to execute a whole run (this module); a
*lease* is a worker's right to a batch of it, for a time (store/leases.py); a *fence* is
the check in each flush's transaction that the claim or the lease is still this process's
(store/fences.py).

Heartbeat age is not a claim: a process stopped with Ctrl-Z, or one waiting on a write
lock, stops beating but still owns its run — resuming it then ran every task twice. So:
- the executor holds an exclusive `flock` on `<db>-locks/<run_id>.lock` (the kernel drops it
  when the process dies, never while it is merely stopped);
- its row carries a claim token taken by compare-and-swap; every write is fenced on it, so
  an executor that lost its claim cannot write into the run;
- a run is `interrupted` only when its owner is verifiably gone: on this host the lock is
  free (or, with no lock file, the pid is gone); on another host its heartbeat is older
  than a lease far longer than the heartbeat.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

from swarm_tui.core.record import record
from swarm_tui.errors import UserError
from swarm_tui.store.own_files import open_own, own_dir
from swarm_tui.store.target import DbTarget, PgTarget

OTHER_HOST_LEASE_S = 120.0  # heartbeats come every second; this is "certainly gone"
LOCK_WAIT_S = 1.0           # a reader's probe holds the lock for microseconds: retry briefly


def this_host() -> str:
    """The host name a claim compares (SWARM_TUI_HOST names it otherwise: a container
    whose name changes, or a test that plays another host)."""
    # os.uname's node name is what socket.gethostname() answers on POSIX, without the
    # socket module's import (~2 ms of every reading command's start)
    return os.environ.get("SWARM_TUI_HOST") or os.uname().nodename


def process_start(pid: int | None = None) -> float | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid."""
    try:
        with open(f"/proc/{pid or os.getpid()}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat[stat.rindex(b")") + 2:].split()
    return float(fields[19])


def lock_dir(db_target: DbTarget) -> Path:
    """Beside a database file; for a server, this host's directory for it (an executor on
    another host is known by its heartbeat lease, as for a shared file)."""
    if isinstance(db_target, PgTarget):
        return db_target.local_dir() / "locks"
    return db_target.with_name(db_target.name + "-locks")


def lock_held(path: str | Path) -> bool:
    """True when some process holds the executor lock at `path` (stopped processes too)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # (never a link, never waiting on a pipe planted under its name)
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops our shared lock at once
    return False


def pid_alive(pid: int, started: float | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return started is None or process_start(pid) in (None, started)


def owner_alive(host: str | None, pid: int | None, started: float | None,
                lock_path: str | None, heartbeat_at: float, now: float | None = None) -> bool:
    """Is the process recorded as a run's executor still there (running or stopped)?"""
    if host == this_host():
        if lock_path and Path(lock_path).exists():
            return lock_held(lock_path)
        return pid is not None and pid_alive(pid, started)
    now = time.time() if now is None else now
    return now - heartbeat_at <= OTHER_HOST_LEASE_S


@record
class Claim:
    """This process's claim on one run: the held lock and the fencing token."""

    run_id: str
    token: str
    lock_path: Path
    fd: int
    host: str
    pid: int
    started: float | None

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)  # drops the flock
            self.fd = -1


def take_lock(db_target: DbTarget, run_id: str, wait_s: float = LOCK_WAIT_S) -> Claim:
    """Take the run's executor lock or raise the one-line refusal (exit 2)."""
    d = lock_dir(db_target)
    try:  # this user's folder and file alone: the lock is truncated and written below
        own_dir(d, parents=isinstance(db_target, PgTarget))
        path = d / f"{run_id}.lock"
        fd = open_own(path, os.O_RDWR | os.O_CREAT)
    except OSError as e:
        raise UserError(f"run {run_id}: cannot create its lock in {d} ({e.strerror})") from None
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise UserError(f"run {run_id}: another process is executing it (lock {path}); "
                                "one run has exactly one executor") from None
            time.sleep(0.02)
    with contextlib.suppress(OSError):  # who holds it, for a person reading the file
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {this_host()}\n".encode())
    return Claim(run_id, os.urandom(8).hex(), path, fd, this_host(), os.getpid(),
                 process_start())
