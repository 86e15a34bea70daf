"""Who holds a SQLite database, read from /proc/locks: the write lock's holder (a real
writer in another process, rollback journal and WAL; the lines of the kernel's format that
are not a holder), and a stopped reader that keeps a run's WAL from shrinking."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from swarm_tui.store.lock_holder import write_lock_holder
from tests.conftest import wait_until

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


def _run_sampling_the_wal(db: Path, env: dict, pin: bool) -> tuple[int, list[str], int | None]:
    """A paced 3,000-task demo run on `db`; with `pin`, a reader stopped inside a read of
    it from its 200th result until the run says so. Returns the WAL's peak size, the run's
    stderr lines, the reader's pid."""
    peak, said, done = [0], [], threading.Event()

    def sample() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError):
                peak[0] = max(peak[0], os.path.getsize(f"{db}-wal"))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", "--demo", "3000", "--headless", "--quiet",
         "--json", "--rate", "300", "--concurrency", "100", "--sim-profile", "fixed:20",
         "--sim-rate-429", "0", "--sim-rate-503", "0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL)
    reader = threading.Thread(target=lambda: said.extend(proc.stderr), daemon=True)
    reader.start()
    holder = None
    try:
        if pin:
            wait_until(lambda: _results(db) >= 200, "the run's first results", 60)
            holder = subprocess.Popen([sys.executable, "-c", READ_AND_STOP, str(db)],
                                      stdout=subprocess.PIPE, text=True)
            assert holder.stdout.readline() == "reading\n"
            wait_until(lambda: any("cannot shrink" in line for line in said),
                       "the WAL warning", 90, seen=lambda: (said, peak[0]))
        proc.stdout.read()
        proc.wait(120)
        reader.join(10)
    finally:
        done.set()
        for p in (proc, holder):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)
    assert proc.returncode in (0, 3), said
    return peak[0], [line.rstrip("\n") for line in said], holder.pid if holder else None


READ_AND_STOP = """import os, signal, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN")
c.execute("SELECT COUNT(*) FROM results").fetchone()
print("reading", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


def _results(db: Path) -> int:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
            return c.execute("SELECT COUNT(*) FROM results").fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_wal_a_stopped_reader_holds_is_said_with_the_reader(tmp_path, no_user_config):
    """A reader inside a read transaction (an sqlite3 shell in BEGIN, a browser, a process
    stopped mid-read) keeps any checkpoint from taking the WAL back: it grew to 178 MiB in a
    30,000-task run (25 MiB otherwise) and nothing said so. Past `[store] wal_warn_mib` the
    run says it, naming the reader — and says nothing when checkpoints keep up, however big
    the WAL got between two of them."""
    db = tmp_path / "runs.db"
    env = {**os.environ, "SWARM_TUI_DB": str(db), "SWARM_TUI__STORE__WAL_WARN_MIB": "1"}
    peak, said, _ = _run_sampling_the_wal(db, env, pin=False)
    assert peak >= 1 << 20, peak  # past the mark, and checkpointed as it went: no word
    assert not any("WAL" in line for line in said), said
    peak, said, pid = _run_sampling_the_wal(db, env, pin=True)
    name = Path(sys.executable).name[:15]
    warned = [line for line in said if "cannot shrink" in line]
    assert len(warned) >= 1 and warned[0].startswith(
        f"swarm-tui: warning: store: the WAL of {db} is "), said
    assert warned[0].endswith(
        f" MiB and cannot shrink while pid {pid} ({name}), stopped (kill -CONT {pid}), holds "
        "a read open; it grows with every write until that read ends"), warned
    with contextlib.closing(sqlite3.connect(db)) as c:  # in the run's log too
        logged = [d for (d,) in c.execute("SELECT detail_json FROM events WHERE kind = "
                                          "'control' AND detail_json LIKE '%cannot shrink%'")]
    assert logged and logged[0] == warned[0].removeprefix("swarm-tui: warning: "), logged
