"""The spill journal's fallback folder under the shared temp directory: on a bastion any
local user can create `/tmp/swarm-tui-spill-<uid>` before us. A folder that is not ours
alone takes no journal (its owner could read, replace or delete paid answers) and gives
none to import (a planted journal would become a run's results)."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

from swarm_tui.store.spill import SpillJournal, fallback_dir, find_journals, read_journal

ROW = ("attempts", ("r1", 0, 1, "ok"))


@pytest.fixture
def shared_tmp(tmp_path, monkeypatch):
    """The system temp directory, here; the database's own folder does not exist, so a
    journal can only go to the fallback."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return tmp_path / "nowhere" / "runs.db"


def test_the_fallback_is_made_ours_alone_and_takes_the_journal(shared_tmp):
    j = SpillJournal(shared_tmp, "run1")
    assert j.append([ROW]), j.error
    folder = fallback_dir()
    assert j.path is not None and j.path.parent == folder
    assert (os.stat(folder).st_mode & 0o777) == 0o700
    assert read_journal(j.path) == [(ROW[0], list(ROW[1]))]
    assert list(find_journals(shared_tmp)) == ["run1"]


def test_a_folder_open_to_others_takes_no_journal(shared_tmp):
    folder = fallback_dir()
    folder.mkdir(mode=0o700)
    os.chmod(folder, 0o777)  # as another user's `mkdir -m 777` would leave it
    j = SpillJournal(shared_tmp, "run1")
    assert not j.append([ROW])
    assert j.error is not None and "mode 777, open to others" in j.error
    assert list(folder.iterdir()) == []


def test_a_link_in_its_place_takes_no_journal(shared_tmp, tmp_path):
    elsewhere = tmp_path / "theirs"
    elsewhere.mkdir(mode=0o700)
    fallback_dir().symlink_to(elsewhere)
    j = SpillJournal(shared_tmp, "run1")
    assert not j.append([ROW])
    assert j.error is not None and "not a folder" in j.error
    assert list(elsewhere.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_folder_another_user_made_first_takes_none_and_gives_none(shared_tmp):
    folder = fallback_dir()
    folder.mkdir(mode=0o700)
    # a journal planted for this database: `resume` would import its rows as results
    planted = SpillJournal(shared_tmp, "run1")
    assert planted.append([ROW]) and planted.path is not None
    os.chown(folder, 65534, 65534)
    assert find_journals(shared_tmp) == {}
    j = SpillJournal(shared_tmp, "run2")
    assert not j.append([ROW])
    assert j.error is not None and "owned by uid 65534" in j.error


@pytest.mark.parametrize("where", ["TMPDIR", "TEMP", "TMP"])
def test_a_process_that_has_not_imported_tempfile_still_finds_fallback_journals(
        tmp_path, monkeypatch, where):
    """Opening a database looks for fallback journals without importing tempfile (issue
    34): the folders `tempfile.gettempdir()` could answer are stat-ed instead. A journal in
    the one it does answer must still be found, whichever candidate that is."""
    tmp = tmp_path / "t"
    tmp.mkdir()
    for name in ("TMPDIR", "TEMP", "TMP"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(where, str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # what gettempdir answers here
    db = tmp_path / "nowhere" / "runs.db"
    assert SpillJournal(db, "run1").append([ROW])
    assert fallback_dir().parent == tmp
    name = fallback_dir().name
    monkeypatch.delitem(sys.modules, "tempfile")  # as in a fresh `swarm-tui report`
    assert list(find_journals(db)) == ["run1"]
    # and where no candidate holds one, none is looked for (tempfile not imported)
    other = tmp_path / "other"
    other.mkdir()
    for name in ("TMPDIR", "TEMP", "TMP"):
        monkeypatch.setenv(name, str(other))
    monkeypatch.chdir(other)
    sys.modules.pop("tempfile", None)
    if not any(os.path.lexists(f"{d}/{name}") for d in ("/tmp", "/var/tmp", "/usr/tmp")):
        assert find_journals(db) == {}
        assert "tempfile" not in sys.modules
