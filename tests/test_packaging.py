"""The wheel's package list is written out in pyproject.toml (so the shipped themes can live
in the top-level themes/ folder): a sub-package missing from it would install broken."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
