"""Who holds a SQLite database's write lock (for the one line a locked database gets), and
who reads its WAL (for the warning of a WAL that cannot shrink).

A process stopped in the middle of a write (SIGSTOP, Ctrl-Z, a debugger) holds SQLite's
single write lock until it continues: every other writer — the run's other workers, a
console's pause — waits, and "locked by another process" alone sent the on-call engineer
looking. The holder is read from /proc/locks (Linux), never by opening the database's
files: closing any descriptor of a file drops every POSIX lock this process holds on it,
SQLite's own included.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

# SQLite's lock bytes (os_unix.c): the WAL write lock in the -shm file (UNIX_SHM_BASE), and
# a rollback-journal writer's RESERVED and PENDING bytes in the database file itself
WAL_WRITE_BYTE = 120
PENDING_BYTE = 0x4000_0000
RESERVED_BYTE = PENDING_BYTE + 1
# a reader's slot (WAL_READ_LOCK(0..4)): 0 reads the database file alone (the WAL was all
# written back when it began), and no checkpoint writes pages back under it either
WAL_READ_BYTES = (123, 127)


class LockHolder(NamedTuple):
    pid: int
    name: str  # /proc/PID/comm: the program's name, never its arguments
    state: str  # /proc/PID/stat's one letter: T stopped, t stopped by a debugger

    @property
    def stopped(self) -> bool:
        return self.state in ("T", "t")

    def said(self) -> str:
        if self.stopped:
            return (f"{self.who()}, which is stopped; nothing can be written until it "
                    f"continues (kill -CONT {self.pid})")
        return f"{self.who()}; try again once it is done"

    def who(self) -> str:
        return f"pid {self.pid} ({self.name})"


def write_lock_holder(db: Path, locks: Path = Path("/proc/locks")) -> LockHolder | None:
    """The other process holding `db`'s write lock, if this system says (else None)."""
    found = _holders(db, ((Path(f"{db}-shm"), WAL_WRITE_BYTE, WAL_WRITE_BYTE),
                          (db, PENDING_BYTE, RESERVED_BYTE)), "WRITE", locks)
    return found[0] if found else None


def wal_readers(db: Path, locks: Path = Path("/proc/locks")) -> list[LockHolder] | None:
    """Other processes inside a read of `db` right now (a read transaction, open or
    stopped): while one is, no checkpoint takes the WAL back past what it reads. None:
    this system does not say."""
    if not os.access(locks, os.R_OK):
        return None
    return _holders(db, ((Path(f"{db}-shm"), *WAL_READ_BYTES),), "READ", locks)


def _holders(db: Path, spans: tuple[tuple[Path, int, int], ...], kind: str,
             locks: Path) -> list[LockHolder]:
    ranges: dict[tuple[int, int, int], tuple[int, int]] = {}
    for file, first, last in spans:
        try:
            st = os.stat(file)
        except OSError:
            continue
        ranges[(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)] = (first, last)
    try:
        lines = locks.read_text().splitlines() if ranges else []
    except OSError:
        return []
    pids: list[int] = []
    for line in lines:
        # "1: POSIX  ADVISORY  WRITE 2546 fe:00:1575 120 120" ("->" marks a waiter)
        f = line.split()
        if len(f) < 8 or f[1] != "POSIX" or f[3] != kind:
            continue
        try:
            pid = int(f[4])
            major, minor, ino = f[5].split(":")
            key = (int(major, 16), int(minor, 16), int(ino))
            start, end = int(f[6]), (float("inf") if f[7] == "EOF" else int(f[7]))
        except ValueError:
            continue
        span = ranges.get(key)
        if span is not None and pid > 0 and pid != os.getpid() and pid not in pids \
                and start <= span[1] and end >= span[0]:
            pids.append(pid)
    return [_holder(pid) for pid in pids]


def _holder(pid: int) -> LockHolder:
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip() or "?"
        stat = Path(f"/proc/{pid}/stat").read_text()
        state = stat[stat.rindex(")") + 1:].split()[0]  # after the name (which may hold ")")
    except (OSError, ValueError, IndexError):
        return LockHolder(pid, "?", "?")
    return LockHolder(pid, "swarm-tui" if _is_ours(pid) else name, state)


def _is_ours(pid: int) -> bool:
    """A swarm-tui process (a worker runs as `python -m swarm_tui`, named "python"). Its
    arguments are only looked at, never shown: another program's may hold a secret."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:3]
    except OSError:
        return False
    return any(a.endswith((b"swarm-tui", b"swarm_tui", b"swarm_tui/__main__.py"))
               for a in argv)
