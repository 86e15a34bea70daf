"""The write lock's holder, read from /proc/locks: a real SQLite writer in another process
(rollback journal and WAL), and the lines of the kernel's format that are not a holder."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from swarm_tui.store.lock_holder import write_lock_holder

pytestmark = pytest.mark.skipif(not Path("/proc/locks").exists(), reason="Linux /proc/locks")

HOLD = """import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute(f"PRAGMA journal_mode={sys.argv[2]}")
c.execute("BEGIN IMMEDIATE")
c.execute("INSERT INTO t VALUES (1)")
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_the_process_inside_a_write_is_found_in_either_journal_mode(tmp_path, journal):
    db = tmp_path / "runs.db"
    with sqlite3.connect(db) as c:
        c.execute(f"PRAGMA journal_mode={journal}")
        c.execute("CREATE TABLE t (x)")
    assert write_lock_holder(db) is None  # nobody writes
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db), journal],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        found = write_lock_holder(db)
        assert found is not None and found.pid == holder.pid and not found.stopped
        assert found.name == Path(sys.executable).name[:15]
        assert write_lock_holder(tmp_path / "other.db") is None  # another file's: not it
    finally:
        holder.communicate("")
    assert write_lock_holder(db) is None  # released


def test_waiters_readers_other_kinds_and_other_bytes_are_not_the_holder(tmp_path):
    db = tmp_path / "runs.db"
    db.write_bytes(b"")
    Path(f"{db}-shm").write_bytes(b"")
    st = os.stat(f"{db}-shm")
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    other = os.getppid()
    locks = tmp_path / "locks"
    locks.write_text("\n".join([
        f"1: POSIX  ADVISORY  READ {other} {dev} 120 120",       # a reader
        f"2: -> POSIX  ADVISORY  WRITE {other} {dev} 120 120",   # a waiter, not a holder
        f"3: OFDLCK ADVISORY  WRITE -1 {dev} 120 120",           # not SQLite's kind
        f"4: POSIX  ADVISORY  WRITE {other} {dev} 128 128",      # another byte (DMS)
        f"5: POSIX  ADVISORY  WRITE {os.getpid()} {dev} 120 120",  # this process itself
        "6: FLOCK  ADVISORY  WRITE 1 00:00:1 0 EOF",
        "garbage",
    ]) + "\n")
    assert write_lock_holder(db, locks) is None
    locks.write_text(locks.read_text() + f"7: POSIX  ADVISORY  WRITE {other} {dev} 100 EOF\n")
    found = write_lock_holder(db, locks)
    assert found is not None and found.pid == other
