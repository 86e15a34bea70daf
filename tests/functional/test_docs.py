"""Docs for readers (issue 33): a short README, the guides as a site that builds strictly
(a broken link or anchor fails the suite), a configuration reference generated from the
settings model, and layer contracts that really go red when broken."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_the_readme_is_short_and_its_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text().splitlines()
    assert len(readme) <= 200, len(readme)
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in readme  # exactly the README's test command, install step included


def test_the_docs_site_builds_strictly(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                        str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == set(re.findall(r":\s*([\w-]+\.md)\s*$", nav, re.M))  # each page in nav
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", (ROOT / "README.md").read_text()))
    assert linked <= pages and len(linked) >= 12  # the README's links reach real pages


def test_the_configuration_reference_is_the_settings_model():
    from swarm_tui.settings.schema import markdown

    shipped = (ROOT / "docs" / "configuration-reference.md").read_text()
    assert shipped == markdown(), ("stale: python -m swarm_tui.settings.schema --markdown > "
                                   "docs/configuration-reference.md")
    assert "## GatewayConfig" in shipped and "`concurrency`" in shipped


def test_a_planted_layer_violation_turns_the_contracts_red(tmp_path):
    """The contracts are not decoration: the store importing the engine's runner, or core
    importing the engine, breaks them (in a copy of the package)."""
    shutil.copytree(ROOT / "swarm_tui", tmp_path / "swarm_tui",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    lint = [os.path.join(os.path.dirname(sys.executable), "lint-imports")]
    clean = subprocess.run(lint, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120)
    assert clean.returncode == 0, clean.stdout
    for module, planted, contract in (
            ("core/states.py", "swarm_tui.engine.runner", "core is the floor"),
            # the store keeps rows: a record it needs comes from core, not the engine
            ("store/reads.py", "swarm_tui.engine.snapshot", "store keeps rows")):
        path = tmp_path / "swarm_tui" / module
        kept = path.read_text()
        path.write_text(kept + f"\nimport {planted}  # planted\n")
        red = subprocess.run(lint, cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=120)
        assert red.returncode != 0 and contract in red.stdout, red.stdout
        path.write_text(kept)
