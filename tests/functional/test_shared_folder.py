"""A database in a folder other local users can write (`--db /tmp/runs.db`, a team
folder): what they plant beside it is never followed (tests/unit/test_lock_doors.py has
each case against the lock code; here the real binary, as an engineer would meet it)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_planted_lock_folder_is_one_line_and_touches_nothing(tmp_path):
    shared, theirs, home = (tmp_path / d for d in ("shared", "theirs", "home"))
    for d in (shared, theirs, home):
        d.mkdir()
    bashrc = home / ".bashrc"
    bashrc.write_text("export PATH=$HOME/bin:$PATH\n")
    (theirs / "schema.lock").symlink_to(bashrc)  # where the first opener's lock goes
    (shared / "runs.db-locks").symlink_to(theirs)  # made before the engineer's first run
    r = subprocess.run([sys.executable, "-m", "swarm_tui", "run", "--demo", "5", "--headless",
                        "--db", str(shared / "runs.db")], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL, env=os.environ)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines == [f"swarm-tui: error: database {shared / 'runs.db'}: its lock "
                     f"{shared / 'runs.db-locks' / 'schema.lock'}: not a folder (a link or "
                     "a file) — not used"], r.stderr
    assert bashrc.read_text() == "export PATH=$HOME/bin:$PATH\n"
    assert sorted(os.listdir(shared)) == ["runs.db-locks"]  # no half-made database left


def test_a_planted_wal_or_shm_file_is_one_line_naming_it(tmp_path):
    """SQLite's `-wal` / `-shm` beside a database in a shared folder: a link another user
    put there first was refused by SQLite as "cannot write here (unable to open database
    file)", naming neither the file nor why; a file of theirs would be used (they could
    read and rewrite the run's pages). Each is one line naming it, and nothing is opened."""
    import pytest

    from tests.conftest import demo_run

    db, _, env = demo_run(tmp_path, "5")
    target = tmp_path / "home" / ".bashrc"
    target.parent.mkdir()
    target.write_text("kept\n")
    for suffix in ("-shm", "-wal"):
        planted = tmp_path / f"runs.db{suffix}"
        planted.unlink(missing_ok=True)
        planted.symlink_to(target)
        r = subprocess.run([sys.executable, "-m", "swarm_tui", "report", "last"],
                           capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL, env={**os.environ, **env})
        assert r.returncode == 2 and r.stdout == "", r.stderr
        assert r.stderr.strip().splitlines() == [
            f"swarm-tui: error: database {db}: {planted} is a link — not followed (it would "
            "make SQLite write where it points); remove it, or keep the database in a "
            "folder of your own"]
        assert target.read_text() == "kept\n"
        planted.unlink()
    if os.geteuid() != 0:
        pytest.skip("a file of another user's needs root to make here")
    theirs = tmp_path / "runs.db-wal"
    theirs.write_bytes(b"")
    os.chown(theirs, 65534, 65534)  # nobody's
    r = subprocess.run([sys.executable, "-m", "swarm_tui", "runs"], capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL,
                       env={**os.environ, **env})
    assert r.returncode == 2, r.stderr
    assert f"{theirs} is not a file of this user's alone — not used" in r.stderr
