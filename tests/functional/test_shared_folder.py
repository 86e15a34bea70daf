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
