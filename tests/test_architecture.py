"""The engine never imports Textual; the core stays UI-free."""

from __future__ import annotations

import pathlib
import subprocess
import sys

CORE = ["swarm_tui.engine.runner", "swarm_tui.engine.summary", "swarm_tui.engine.cost",
        "swarm_tui.gateway.client", "swarm_tui.gateway.keypool", "swarm_tui.gateway.keyops",
        "swarm_tui.canary.controller", "swarm_tui.commands.canary", "swarm_tui.commands.keys",
        "swarm_tui.commands.cost", "swarm_tui.sim.server", "swarm_tui.session",
        "swarm_tui.sources", "swarm_tui.headless", "swarm_tui.cli"]


def test_core_modules_do_not_import_textual():
    code = ("import sys\n" + "".join(f"import {m}\n" for m in CORE)
            + "bad = [m for m in sys.modules if m == 'textual' or m.startswith('textual.')]\n"
            + "print(bad); raise SystemExit(1 if bad else 0)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_textual_import_statement_in_core_packages():
    root = pathlib.Path(__file__).parent.parent / "swarm_tui"
    for pkg in ("engine", "gateway", "sim", "store", "canary", "commands"):
        for f in (root / pkg).rglob("*.py"):
            for line in f.read_text().splitlines():
                stripped = line.strip()
                assert not stripped.startswith(("import textual", "from textual")), f
