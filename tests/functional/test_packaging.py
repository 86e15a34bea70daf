"""The wheel's package list is written out in pyproject.toml (so the shipped themes can live
in the top-level themes/ folder): a sub-package missing from it would install broken."""

from __future__ import annotations

import os
import subprocess
import tomllib
from importlib import resources
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_sub_package_is_listed_for_the_wheel() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "swarm_tui").rglob("__init__.py")}
    assert found - listed == set(), "add these to [tool.setuptools] packages"
    assert cfg["package-dir"]["swarm_tui.themes"] == "themes"


def test_shipped_themes_install_from_the_top_level_folder() -> None:
    on_disk = sorted(p.name for p in (ROOT / "themes").glob("*.toml"))
    installed = sorted(e.name for e in resources.files("swarm_tui.themes").iterdir()
                       if e.name.endswith(".toml"))
    assert on_disk and installed == on_disk
    assert not (ROOT / "swarm_tui" / "themes").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_offline_bundle_installs_and_runs_with_no_index(tmp_path) -> None:
    """`scripts/offline_bundle.sh` (wheels of everything + installer); its installer in a
    clean environment with no pip configuration and PIP_NO_INDEX=1: the wheel — themes
    included — installs and runs the headless demo."""
    out = tmp_path / "b" / "swarm-tui-offline"
    subprocess.run(["sh", str(ROOT / "scripts" / "offline_bundle.sh"), str(out)], check=True,
                   capture_output=True, timeout=240)
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    subprocess.run(["tar", "xzf", f"{out}.tar.gz", "-C", str(unpacked)], check=True)
    clean = {"HOME": str(tmp_path), "PATH": os.environ["PATH"], "PIP_NO_INDEX": "1",
             "PIP_CONFIG_FILE": os.devnull}
    venv = tmp_path / "venv"
    r = subprocess.run(["sh", str(unpacked / "swarm-tui-offline" / "install.sh"), str(venv)],
                       env=clean, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run([str(venv / "bin" / "swarm-tui"), "run", "--demo", "100", "--headless",
                        "--theme", "swarm-ansi"],
                       env={**clean, "SWARM_TUI_DB": str(tmp_path / "runs.db")},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 3), r.stderr
    assert "100/100 succeeded" in r.stdout
    themes = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "from importlib import resources; print(sorted("
         "e.name for e in resources.files('swarm_tui.themes').iterdir() if e.name.endswith("
         "'.toml')))"], env=clean, capture_output=True, text=True, timeout=60,
        cwd=tmp_path)  # not the checkout: its swarm_tui would shadow the installed one
    assert themes.stdout.strip() == str(sorted(p.name for p in (ROOT / "themes").glob("*.toml")))
