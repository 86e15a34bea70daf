"""`ruff check` is part of the suite, so CI fails on lint."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).parent.parent.parent


def test_ruff_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed (it is in the [test] extra)")
    r = subprocess.run([ruff, "check", "swarm_tui", "tests", "bench"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_package_type_checks():
    """mypy over the package ([tool.mypy] in pyproject): the seams stay typed. A fresh
    clone has no mypy cache: on one core beside three other test workers it outran the
    suite's 120 s per test, so it has a bound of its own, not one set by a machine's speed."""
    import sys

    mypy = pathlib.Path(sys.executable).parent / "mypy"
    r = subprocess.run([str(mypy)], cwd=ROOT, capture_output=True, text=True, timeout=540)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
