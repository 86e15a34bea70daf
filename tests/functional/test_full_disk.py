"""Outputs the disk refuses: standard output on a full disk (/dev/full), an `--out` file
past the file size limit (RLIMIT_FSIZE, EFBIG), a screenshot that cannot be written.
Each is one line naming the output, exit 2 — never an internal error or Textual's
traceback panel — a half-written file is not left to pass for a whole one, and a run
whose summary could not be printed is stored and named."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, demo_run

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


def _to_full(*args: str, env: dict[str, str], limit: int | None = None
             ) -> subprocess.CompletedProcess[str]:
    """The real binary with its standard output on /dev/full (every write: ENOSPC)."""
    def cap() -> None:
        if limit is not None:  # Python ignores SIGXFSZ: a write past it is EFBIG (the
            # limit is above SQLite's 32 KiB shared-memory file)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "swarm_tui", *args], stdout=full,
                           stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                           env={**os.environ, **env}, timeout=120, preexec_fn=cap)
    return subprocess.CompletedProcess(p.args, p.returncode, "", p.stderr)


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> tuple[Path, str, dict[str, str]]:
    return demo_run(tmp_path_factory.mktemp("full"), "60")


@pytest.mark.parametrize("command", [["runs"], ["report", "last"], ["report", "last", "--json"],
                                     ["export", "last"], ["cost", "last"]])
def test_standard_output_on_a_full_disk_is_one_line_exit_2(stored, command):
    _, _, env = stored
    r = _to_full(*command, env=env)
    assert_one_line_error(r, 2, "standard output", "No space left on device")


def test_an_export_past_the_file_size_limit_is_removed_not_left_half_written(
        stored, tmp_path):
    _, run_id, env = stored
    out = tmp_path / "export.jsonl"
    whole = subprocess.run([sys.executable, "-m", "swarm_tui", "export", run_id],
                           capture_output=True, env={**os.environ, **env}, timeout=60)
    assert whole.returncode == 0 and len(whole.stdout) > 4 * 65536, whole.stderr
    r = _to_full("export", run_id, "--out", str(out), env=env, limit=65536)
    assert_one_line_error(r, 2, f"--out {out}", "cannot write")
    assert not out.exists()  # a truncated JSONL must not pass for the run's export
    r = _to_full("export", run_id, "--out", str(out), env=env)  # stdout plays no part
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == whole.stdout and (out.stat().st_mode & 0o777) == 0o600


def test_a_screenshot_that_cannot_be_written_is_one_line(stored):
    _, run_id, env = stored
    with open(os.devnull, "w") as null:
        p = subprocess.run([sys.executable, "-m", "swarm_tui", "replay", run_id, "--at", "end",
                            "--screenshot", "/dev/full", "--size", "80x24"],
                           stdout=null, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                           text=True, env={**os.environ, **env}, timeout=120)
    r = subprocess.CompletedProcess(p.args, p.returncode, "", p.stderr)
    assert_one_line_error(r, 2, "--screenshot /dev/full", "No space left on device")


def test_a_run_whose_summary_the_disk_refused_is_stored_and_named(stored):
    _, _, env = stored
    r = _to_full("run", "--demo", "20", "--headless", "--quiet", "--json", env=env)
    assert_one_line_error(r, 2, "standard output", "is stored: `swarm-tui report ")
    run_id = r.stderr.split("`swarm-tui report ")[1].split("`")[0]
    report = subprocess.run([sys.executable, "-m", "swarm_tui", "report", run_id, "--json"],
                            capture_output=True, text=True, env={**os.environ, **env},
                            timeout=60)
    assert report.returncode == 0, report.stderr
    summary = json.loads(report.stdout)
    assert summary["run_id"] == run_id and summary["succeeded"] == 20


def _export_to(target: Path, run_id: str, env: dict[str, str]
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swarm_tui", "export", run_id, "--out",
                           str(target)], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env={**os.environ, **env})


def test_an_export_over_a_file_of_ours_is_made_private(stored, tmp_path):
    _, run_id, env = stored
    out = tmp_path / "old.jsonl"
    out.write_text("x" * 10_000_000)
    os.chmod(out, 0o644)
    r = _export_to(out, run_id, env)
    assert r.returncode == 0, r.stderr
    assert (out.stat().st_mode & 0o777) == 0o600 and out.stat().st_size < 10_000_000
    assert out.read_text().startswith('{"')


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another user's needs root to make")
def test_a_file_or_link_another_user_put_there_first_is_not_written(stored, tmp_path):
    """`--out /tmp/run.jsonl` where another user made /tmp/run.jsonl (0666) or a link
    there first: writing would hand them the prompts and answers, or truncate what the
    link points at. Refused with one line, nothing of theirs or ours changed."""
    _, run_id, env = stored
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # as /tmp
    theirs = shared / "run.jsonl"
    theirs.write_text("theirs\n")
    os.chmod(theirs, 0o666)
    os.chown(theirs, 65534, 65534)
    r = _export_to(theirs, run_id, env)
    assert_one_line_error(r, 2, f"--out {theirs}", "a file owned by uid 65534")
    assert theirs.read_text() == "theirs\n"
    mine = tmp_path / "notes.txt"
    mine.write_text("mine\n")
    link = shared / "link.jsonl"
    link.symlink_to(mine)
    os.lchown(link, 65534, 65534)
    r = _export_to(link, run_id, env)
    assert_one_line_error(r, 2, f"--out {link}", "cannot write")
    # ours, or the kernel's own refusal where protected_symlinks is on
    assert "a link owned by uid 65534" in r.stderr or "Permission denied" in r.stderr
    assert mine.read_text() == "mine\n"


def test_an_export_to_dev_stdout_whose_reader_left_is_no_error(stored):
    """`export RUN --out /dev/stdout | head -c 20`: as with standard output itself, a
    reader that leaves is not an error (it was exit 2, 'cannot write (Broken pipe)')."""
    _, run_id, env = stored
    p = subprocess.Popen([sys.executable, "-m", "swarm_tui", "export", run_id, "--out",
                          "/dev/stdout"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, env={**os.environ, **env})
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.read(20).startswith(b'{"')
    p.stdout.close()  # more than a pipe holds is still to come: the next write fails
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 0, err
    assert "Traceback" not in err and "error" not in err
