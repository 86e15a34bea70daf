"""Locks and journals beside a database in a folder other users can write (`--db
/tmp/runs.db`, a team folder): another local user can make `runs.db-locks` first and
plant a link where a run's lock will be. The lock is truncated and written ("pid host")
when taken — through a link, that was any file of the engineer's (~/.bashrc). A journal
planted beside the database was imported as a run's paid results."""

from __future__ import annotations

import os

import pytest

from swarm_tui.errors import UserError
from swarm_tui.store.claims import lock_dir, lock_held, take_lock
from swarm_tui.store.spill import SUFFIX, find_journals

VICTIM = "export PATH=$HOME/bin:$PATH\n"


@pytest.fixture
def db(tmp_path):
    return tmp_path / "shared" / "runs.db"


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "home" / ".bashrc"
    path.parent.mkdir()
    path.write_text(VICTIM)
    return path


def test_a_link_planted_where_a_lock_goes_is_not_followed(db, victim):
    locks = lock_dir(db)
    locks.mkdir(parents=True, mode=0o700)
    (locks / "r1.lock").symlink_to(victim)
    with pytest.raises(UserError, match=r"cannot create its lock .*a link — not followed"):
        take_lock(db, "r1")
    assert victim.read_text() == VICTIM


def test_a_lock_folder_that_is_a_link_is_not_used(db, tmp_path, victim):
    elsewhere = tmp_path / "theirs"
    elsewhere.mkdir(mode=0o700)
    os.symlink(victim, elsewhere / "r1.lock")
    db.parent.mkdir()
    lock_dir(db).symlink_to(elsewhere)
    with pytest.raises(UserError, match=r"not a folder \(a link or a file\) — not used"):
        take_lock(db, "r1")
    assert victim.read_text() == VICTIM and os.listdir(elsewhere) == ["r1.lock"]


def test_a_lock_folder_open_to_others_is_not_used(db):
    locks = lock_dir(db)
    locks.mkdir(parents=True)
    os.chmod(locks, 0o777)  # as another user's `mkdir -m 777` leaves it
    with pytest.raises(UserError, match="mode 777, open to others — not used"):
        take_lock(db, "r1")
    assert os.listdir(locks) == []


def test_a_second_name_for_another_file_is_not_a_lock(db, victim):
    locks = lock_dir(db)
    locks.mkdir(parents=True, mode=0o700)
    os.link(victim, locks / "r1.lock")  # a hard link: the same file under the lock's name
    with pytest.raises(UserError, match="not a file of this user's alone"):
        take_lock(db, "r1")
    assert victim.read_text() == VICTIM


def test_the_lock_in_its_own_folder_is_taken_and_held(db):
    db.parent.mkdir()
    claim = take_lock(db, "r1")
    try:
        assert lock_held(claim.lock_path)
        assert (os.stat(lock_dir(db)).st_mode & 0o777) == 0o700
    finally:
        claim.release()
    assert not lock_held(claim.lock_path)


def test_a_pipe_under_a_locks_name_never_blocks_a_reader(tmp_path):
    fifo = tmp_path / "r1.lock"
    os.mkfifo(fifo)  # opened for reading without O_NONBLOCK, this waited for a writer
    assert not lock_held(fifo)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user takes root")
def test_a_journal_another_user_left_beside_the_database_is_not_imported(db):
    db.parent.mkdir()
    ours, theirs = (db.parent / f"runs.db-{run}{SUFFIX}" for run in ("r1", "r2"))
    ours.write_text("")
    theirs.write_text("")
    os.chown(theirs, 65534, 65534)  # nobody's
    assert list(find_journals(db)) == ["r1"]
