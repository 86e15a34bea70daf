"""The layers, as contracts that fail the suite when broken (pyproject's
[tool.importlinter]): engine and gateway are the core; the store records the engine and
never drives it; the ui reads snapshots through run sources, never command handlers, SQL
or the network; nothing imports the command line. And SQL is written only under store/."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

import swarm_tui

ROOT = pathlib.Path(__file__).parent.parent.parent
SQL = re.compile(r"""\.execute(many)?\(\s*f?["'](\s*)(SELECT|INSERT|UPDATE|DELETE|BEGIN|CREATE|"""
                 r"""ALTER|DROP|PRAGMA|WITH)""", re.I)


def test_the_layer_contracts_hold():
    lint = pathlib.Path(sys.executable).parent / "lint-imports"
    r = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def _import_circles() -> list[list[str]]:
    """Every circle of imports among swarm_tui's modules (a function's own imports count:
    a lazy import is still a dependency), as strongly connected groups."""
    import grimp

    graph = grimp.build_graph("swarm_tui", exclude_type_checking_imports=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's, on a graph of ~200 modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return circles


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else module


def test_no_import_circle_between_or_inside_packages():
    """Issue 33: the store imported the canary and the canary the store; store/db,
    pg_schema, reconcile and writer went round. Neither modules nor packages may."""
    assert _import_circles() == []
    import grimp

    graph = grimp.build_graph("swarm_tui", exclude_type_checking_imports=True)
    packages = sorted({_package(m) for m in graph.modules if m.count(".") >= 2})
    both_ways = []
    for a in packages:
        for b in packages:
            if a < b and graph.find_matching_direct_imports(import_expression=f"{a}.** -> {b}.**") \
                    and graph.find_matching_direct_imports(import_expression=f"{b}.** -> {a}.**"):
                both_ways.append((a, b))
    assert both_ways == []


def test_sql_is_written_only_under_store():
    offenders = []
    for f in (ROOT / "swarm_tui").rglob("*.py"):
        if "store" in f.relative_to(ROOT / "swarm_tui").parts[:1]:
            continue
        text = f.read_text()
        offenders += [f"{f.relative_to(ROOT)}: {m.group(0)}" for m in SQL.finditer(text)]
    assert not offenders, offenders


LIFECYCLE_STEPS = ("StoreWriter", "Sidecars", "run_with_progress", "collector_for_a_run")


def _calls_of(tree: object, names: tuple[str, ...]) -> list[tuple[str, int]]:
    import ast

    found = []
    for n in ast.walk(tree):  # type: ignore[arg-type]
        if isinstance(n, ast.Call):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(
                f, ast.Attribute) else None
            if name in names:
                found.append((name, n.lineno))
    return found


def test_a_runs_lifecycle_is_written_once():
    """A new run, a resume and a worker go through run/lifecycle.py: the writer, the
    sidecars, the collector and the progress loop are started nowhere else (they were
    written out twice and drifted)."""
    import ast

    offenders, inside = [], set()
    for f in (ROOT / "swarm_tui").rglob("*.py"):
        calls = _calls_of(ast.parse(f.read_text()), LIFECYCLE_STEPS)
        if f.name == "lifecycle.py":
            inside = {name for name, _ in calls}
        else:
            offenders += [f"{f.relative_to(ROOT)}:{line} {name}" for name, line in calls]
    assert not offenders, offenders
    assert inside == set(LIFECYCLE_STEPS)  # the check looks at real calls

def test_the_console_asks_its_run_source_only_what_the_protocol_declares():
    """One RunSource protocol for live, watched and replayed runs: the console never probes
    a source (or itself) with getattr / hasattr — mypy checks the calls against it."""
    import ast

    offenders = []
    for name in ("app.py", "widgets.py", "keys_panel.py", "cost_panel.py", "canary_panel.py"):
        tree = ast.parse((ROOT / "swarm_tui" / "ui" / name).read_text())
        offenders += [f"{name}:{n.lineno}" for n in ast.walk(tree)
                      if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                      and n.func.id in ("getattr", "hasattr")]
    assert not offenders, offenders


@pytest.mark.slow
def test_core_modules_do_not_load_textual_at_runtime():
    """Beyond the import graph: importing the command line and every non-ui layer must not
    load Textual (a lazy import inside a function would slip past the static check)."""
    core = ["swarm_tui.cli", "swarm_tui.run_sources", "swarm_tui.run.stored_run",
            "swarm_tui.report.history", "swarm_tui.report.cost", "swarm_tui.commands.keys",
            "swarm_tui.commands.canary", "swarm_tui.sim.server"]
    code = ("import sys\n" + "".join(f"import {m}\n" for m in core)
            + "bad = [m for m in sys.modules if m == 'textual' or m.startswith('textual.')]\n"
            + "print(bad); raise SystemExit(1 if bad else 0)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def one_run_db(tmp_path_factory) -> pathlib.Path:
    """A store holding one finished run (`runs` on a missing store imports nothing)."""
    home = tmp_path_factory.mktemp("one_run")
    env = {**os.environ, "SWARM_TUI_DB": str(home / "runs.db"),
           "XDG_CONFIG_HOME": str(home / "xdg")}
    env.pop("SWARM_TUI_CONFIG", None)
    r = subprocess.run([sys.executable, "-m", "swarm_tui", "run", "--demo", "20", "--headless",
                        "--sim-profile", "fixed:5"], capture_output=True, text=True, env=env,
                       stdin=subprocess.DEVNULL, timeout=90)
    assert r.returncode in (0, 3), r.stderr
    return home


def _python_in(home: pathlib.Path, code: str, timeout: float) -> subprocess.CompletedProcess:
    """`python -c code` with its store and config under `home` (no user config)."""
    env = {**os.environ, "SWARM_TUI_DB": str(home / "runs.db"),
           "XDG_CONFIG_HOME": str(home / "xdg"), "XDG_CACHE_HOME": str(home / "cache")}
    env.pop("SWARM_TUI_CONFIG", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize("argv", [["runs"], ["runs", "--json"], ["canary", "--help"],
                                  ["--help"], ["run", "--help"], ["report", "last"],
                                  ["keys", "list"], ["canary", "status"], ["cost", "last"],
                                  ["export", "last"]], ids=" ".join)
def test_reading_commands_import_no_console_and_no_http_client(one_run_db, argv):
    """`runs` (and the parser of every command) starts without Textual, the openai SDK, an
    HTTP transport or the on-call exporters: they are most of the console's import time
    (and `runs` without pydantic-settings: the config's sections are plain pydantic)."""
    heavy = {"textual", "openai", "httpx2", "aiohttp", "uvicorn", "rich", "prometheus_client",
             "opentelemetry"}
    if argv[0] == "runs":  # rows to lines: no config, no models, no engine (issue 34: ≤ 5×)
        heavy |= {"pydantic", "pydantic_settings", "swarm_tui.engine", "swarm_tui.workload",
                  "swarm_tui.settings.sections"}
        heavy.add("psycopg")  # a SQLite store: no PostgreSQL driver (~45 ms)
    if argv[0] in ("runs", "report", "keys", "canary", "cost", "export") and "--help" not in argv:
        heavy.add("uvloop")  # a few queries: ~2 ms to import, nothing to win
        heavy.add("aiosqlite")  # nor a thread per statement (store/direct.py)
        heavy.add("asyncio")  # nor an event loop: ~4× `python -c pass` alone (aio.run_here)
    if argv[0] == "runs":  # a store named by SWARM_TUI_DB and no config to look for: no
        heavy.add("platformdirs")  # platformdirs (~4 ms, it brings tempfile and shutil)
        # nor OpenSSL's hashes, sockets or shutil (~8 ms together): a key's fingerprint, a
        # host name, a journal's tag and argparse's terminal width are asked for otherwise
        heavy |= {"hashlib", "socket", "shutil"}
        spill = f"swarm-tui-spill-{os.getuid()}"
        if not any(os.path.lexists(f"{d}/{spill}") for d in ("/tmp", "/var/tmp", "/usr/tmp")):
            heavy.add("tempfile")  # unless a fallback folder exists to look in
    if argv == ["--help"]:
        heavy |= {"hashlib", "socket", "shutil", "tempfile"}
        # nor dataclasses (it brings inspect, ast and dis: ~14 ms): the grammar builds no record
        heavy |= {"dataclasses", "inspect"}
    if argv[0] in ("report", "keys", "canary", "cost") and "--help" not in argv:
        # the validated config and stored rows: never the engine's runner, the workload's
        # models, the loop timer (hdrh) or a run's machinery (issue 33's core/ floor) —
        # and, once a validated copy of this config is kept, not pydantic either
        heavy |= {"swarm_tui.workload", "swarm_tui.engine.runner", "swarm_tui.engine.looplag",
                  "hdrh", "swarm_tui.run", "swarm_tui.run_sources", "pydantic",
                  "pydantic_settings", "pydantic_core", "swarm_tui.settings.loader",
                  "swarm_tui.settings.run_sections", "tomllib"}
        # nor OpenSSL (the config's digest is CPython's own SHA-256: swarm_tui/digest.py),
        # nor platformdirs on Linux (the XDG rule in paths.py), nor the statistics module
        # (a gate's z is computed when a gate is evaluated): ~10 ms of a ~55 ms start
        heavy |= {"hashlib", "statistics"}
        if sys.platform == "linux":
            heavy.add("platformdirs")
    if argv[0] in ("runs", "report", "keys", "canary", "cost") and "--help" not in argv:
        # nor dataclasses, nor inspect, ast and dis with it (~20 ms), nor a compiled method per
        # record class (~1 ms each): the records they read are core/record.py's
        heavy |= {"dataclasses", "inspect"}
    if "--help" in argv:  # the grammar alone: no engine, no models, no loop (issue 34)
        heavy |= {"pydantic", "asyncio", "aiosqlite", "psycopg", "swarm_tui.engine",
                  "swarm_tui.store", "swarm_tui.workload"}
    code = ("import sys, contextlib, io\n"
            "from swarm_tui.cli import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    try:\n"
            f"        main({argv!r})\n"
            "    except SystemExit:\n"
            "        pass\n"
            f"heavy = {sorted(heavy)!r}\n"
            "names = {'.'.join(m.split('.')[:i]) for m in sys.modules for i in (1, 2, 3)}\n"
            "print(out.getvalue())\n"
            "import gc\n"
            "from swarm_tui.cli import collector\n"
            "# a command that ends keeps the collector's start-up threshold to the end\n"
            "assert gc.get_threshold() == collector.STARTING, gc.get_threshold()\n"
            "print(sorted(names & set(heavy)))\n")
    if argv[0] in ("report", "keys", "canary", "cost") and "--help" not in argv:
        _python_in(one_run_db, f"from swarm_tui.cli import main\nmain({argv!r})", timeout=60)
    r = _python_in(one_run_db, code, timeout=60)
    if argv[0] == "runs":  # it listed the stored run (not "no runs recorded yet")
        assert "finished" in r.stdout, r.stdout
    assert r.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(("argv", "exit_code"), [
    (["runs"], 0), (["report", "last"], 0), (["report", "no-such-run"], 2), (["--help"], 0),
    (["keys", "list"], 0)], ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_a_reading_command_ends_without_the_last_collection(one_run_db, argv, exit_code):
    """Issue 34: the interpreter's last full collection walked every object the imports
    made, ~6 ms of a ~50 ms `report last`. A command that ends (it kept the start-up
    threshold) freezes what is left as it returns, error or not; its exit code is the
    command's, and what it printed is all there (the exit still flushes and closes)."""
    code = ("import contextlib, gc, io, sys\n"
            "from swarm_tui.cli import entry\n"
            f"sys.argv = ['swarm-tui', *{argv!r}]\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    try:\n"
            "        entry()\n"
            "    except SystemExit as e:\n"
            "        code = e.code\n"
            "print(out.getvalue())\n"
            "print('exit', code, 'frozen', gc.get_freeze_count() > 1000)\n")
    r = _python_in(one_run_db, code, timeout=60)
    assert r.stdout.strip().splitlines()[-1] == f"exit {exit_code} frozen True", r.stdout
    if argv == ["runs"]:
        assert "finished" in r.stdout, r.stdout
    if exit_code:
        assert "no-such-run" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_installed_script_and_python_m_call_the_entry():
    """Both ways in end through cli.entry (the frozen exit above), not main() alone."""
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="swarm-tui")
    assert script.value == "swarm_tui.cli:entry"
    main_py = pathlib.Path(swarm_tui.__file__).with_name("__main__.py").read_text()
    assert "entry()" in main_py


def test_a_run_on_the_wire_path_never_imports_the_sdk(tmp_path):
    """Issue 34: the hot path and its preflight speak the protocol on aiohttp; the openai
    SDK (~0.35 s of CPU at every run's and worker's start) loads only for the reference
    transports. Nor does the run serve the simulator it talks to (its child process does):
    uvicorn, with click and watchfiles, was ~50 ms of every run's and worker's start. Nor,
    without --metrics-port, the Prometheus exporter (~30 ms)."""
    code = ("import gc, sys\n"
            "from swarm_tui.cli import collector, entry\n"
            "sys.argv = ['swarm-tui', 'run', '--demo', '5', '--headless', '--quiet']\n"
            "try:\n"
            "    entry()  # as the installed script and `python -m` call it\n"
            "except SystemExit as e:\n"
            "    code = e.code\n"
            "assert code in (0, 3), code  # (3: the SLA judged on a loaded machine)\n"
            "# a run stays up: its own thresholds once started (cli/collector.py, runtime.py)\n"
            "assert gc.get_threshold() not in (collector.STARTING, collector.USUAL)\n"
            "# and it ends with the last collection: what a run holds (sockets, a child, the\n"
            "# store's threads) is finalized as usual\n"
            "assert gc.get_freeze_count() == 0, gc.get_freeze_count()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in\n"
            "             ('openai', 'httpx2', 'uvicorn', 'click', 'watchfiles',\n"
            "              'prometheus_client')))\n")
    r = _python_in(tmp_path, code, timeout=90)
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout
