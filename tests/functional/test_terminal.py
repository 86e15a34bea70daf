"""The real binary on a pseudo-terminal (80x24 unless said), screen read through pyte.

These are the scenarios `run_test()` pilots missed: a theme's stylesheet error on a real
terminal, options given before the sub-command, markup typed into the filter, ctrl+q on a
live run, fast key repeats.
"""

from __future__ import annotations

import os
import re

import pytest

from tests.pty_harness import PtyApp

# every test here drives the real binary on a pseudo-terminal
pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]
THEMES = ["swarm-dark", "swarm-light", "swarm-high-contrast", "swarm-ansi", "swarm-production"]


@pytest.fixture
def env(tmp_path):
    return {"SWARM_TUI_DB": str(tmp_path / "runs.db"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
            "XDG_DATA_HOME": str(tmp_path / "data")}


def _no_stylesheet_error(app: PtyApp) -> None:
    assert b"Error in stylesheet" not in app.raw and b"Traceback" not in app.raw


@pytest.mark.parametrize(("theme", "term", "no_color"), [
    *[(t, "xterm-256color", False) for t in THEMES],
    ("swarm-ansi", "screen", False), ("swarm-ansi", "linux", False),
    ("swarm-ansi", "xterm-256color", True),
])
def test_every_theme_loads_on_a_real_terminal(env, theme, term, no_color):
    if no_color:
        env = {**env, "NO_COLOR": "1"}
    app = PtyApp("--theme", theme, env=env, term=term)
    try:
        app.wait_for("press D (or :demo) to start", what="the idle console")
        _no_stylesheet_error(app)
        for _ in THEMES:  # `t` walks through every theme on this terminal
            app.send("t")
            app.wait_for("theme: ", what="the theme toast")
        _no_stylesheet_error(app)
        app.send("q")
        assert app.wait() == 0
    finally:
        app.kill()


def _quit_live_run(app: PtyApp, key: str = "q") -> None:
    """q (ctrl+q, ctrl+c, :q) on a live run asks first; yes cancels it cleanly, ends 130."""
    app.send(key)
    app.wait_for("Cancel it and quit?", what=f"the quit question after {key!r}")
    app.send("y")
    assert app.wait(90) == 130


def _status(app: PtyApp) -> str:
    return app.text().splitlines()[0]


def test_global_options_before_the_sub_command_are_obeyed(env, tmp_path):
    app = PtyApp("--readonly", "--theme", "swarm-ansi", "run", "--demo", "3000",
                 "--concurrency", "20", env=env)
    try:
        app.wait_for(lambda t: "RUNNING" in t, what="a running swarm")
        app.send("p")
        screen = app.wait_for("read-only", what="the read-only refusal")
        assert "PAUSED" not in screen
        _quit_live_run(app, "\x11")  # ctrl+q on a live run: the same question as q
    finally:
        app.kill()


def test_filter_with_markup_fast_plus_and_quit(env):
    # 20 in flight: the run outlives the test's key presses on a loaded machine
    app = PtyApp("run", "--demo", "8000", "--concurrency", "20", env=env, cols=120, rows=40)
    try:
        app.wait_for(lambda t: "RUNNING" in t, what="a running swarm")
        app.send("/")
        app.wait_for("filter: state:failed", what="the filter line, visible")
        app.send("demo-0000[0-4]")  # markup-looking text is a regex here, shown as typed
        app.send("\r")
        app.wait_for("filter: demo-0000[0-4] (5 of ", what="the filter with its count")
        app.send("\x1b")  # escape clears it
        for _ in range(10):  # ten fast presses: ten steps of 10 from 20
            app.send("+")
        app.wait_for("concurrency → 120", what="the tenth step's toast")
        _no_stylesheet_error(app)
        _quit_live_run(app)
    finally:
        app.kill()


@pytest.mark.slow
def test_a_scrolled_grid_keeps_repainting(env):
    """After End on a long run the visible cells must follow the run to its end (they
    stayed `·` queued while the status said FINISHED, and an operator cancelled an agent
    that had long succeeded)."""
    app = PtyApp("run", "--demo", "2500", "--rate", "0", "--no-sim-incidents",
                 "--sim-rate-429", "0", "--sim-rate-503", "0", env=env)
    try:
        app.wait_for(lambda t: "RUNNING" in t, what="a running swarm")
        app.send("v")  # from the agents view to every task
        app.wait_for("view: every task", what="the all-tasks grid")
        app.send("\x1b[F")  # End
        app.wait_for("FINISHED", timeout=60, what="the run's end")
        # the frame after FINISHED may still be arriving: wait on the grid's state (with the
        # old refresh it never got there)
        screen = app.wait_for(lambda t: "FINISHED" in t and not any(
            g in row for row in t.splitlines()[2:12] for g in "·○◐↻"), timeout=15,
            what="every visible cell finished")
        grid = screen.splitlines()[2:12]
        assert sum(row.count("●") for row in grid) > 100
        app.send("q")
        assert app.wait(30) in (0, 3)  # 3: the SLA verdict of a slow machine's latency
    finally:
        app.kill()


def test_a_hang_up_cancels_the_run_cleanly_and_it_stays_resumable(env, tmp_path):
    import json
    import signal

    from tests.conftest import swarm

    app = PtyApp("run", "--demo", "8000", "--concurrency", "20", env=env)
    try:
        app.wait_for(lambda t: (m := re.search(r"(\d+)/8000", t)) is not None
                     and int(m.group(1)) >= 100, what="some finished tasks")
        os.kill(app.pid, signal.SIGHUP)  # what an SSH drop sends the session
        assert app.wait(90) == 129
    finally:
        app.kill()
    runs = json.loads(swarm("runs", "--json", env=env).stdout)
    assert runs[0]["status"] == "cancelled" and 0 < runs[0]["done"] < 8000


def test_a_lost_terminal_ends_a_headless_run_cleanly(env):
    """The SSH link drops under `run --headless` with its progress bar on the terminal: the
    terminal is gone (the pty's other side closed — the kernel sends SIGHUP, and every
    later write would fail). The run is cancelled cleanly, stored, 129, resumable."""
    import json

    from tests.conftest import swarm

    app = PtyApp("run", "--demo", "8000", "--headless", "--concurrency", "20", env=env)
    try:
        app.wait_for(lambda t: (m := re.search(r"(\d+)/8000", t)) is not None
                     and int(m.group(1)) >= 100, what="some finished tasks")
        assert app.hang_up(timeout=90) == 129, app.returncode
    finally:
        app.kill()
    runs = json.loads(swarm("runs", "--json", env=env).stdout)
    assert runs[0]["status"] == "cancelled" and 0 < runs[0]["done"] < 8000, runs[0]


def test_cancel_then_quit_ends_130_like_quitting_a_live_run(env):
    app = PtyApp("run", "--demo", "8000", "--concurrency", "20", env=env)
    try:
        app.wait_for(lambda t: "RUNNING" in t, what="a running swarm")
        app.send("x")
        app.wait_for("Cancel the whole run?", what="the cancel question")
        app.send("y")
        app.wait_for("CANCELLED", timeout=60, what="the cancelled run")
        app.send("q")
        assert app.wait(60) == 130
    finally:
        app.kill()


def test_the_headless_progress_line_stays_on_one_80_column_row(env):
    app = PtyApp("run", "--demo", "3000", "--headless", "--concurrency", "20", env=env)
    try:
        screen = app.wait_for(lambda t: "in-flight" in t, what="the progress line")
        for _ in range(3):  # several updates: each rewrites the same row
            screen = app.wait_for(lambda t, s=screen: t != s and "in-flight" in t,
                                  what="another update")
            rows = [r for r in screen.splitlines() if "calls/s" in r or "in-flight" in r]
            assert len(rows) == 1, screen
    finally:
        app.kill()


def test_switching_theme_mid_run_keeps_the_run_going(env):
    app = PtyApp("run", "--demo", "8000", "--concurrency", "20", env=env)
    try:
        app.wait_for(lambda t: "RUNNING" in t, what="a running swarm")
        for _ in THEMES:  # every theme, the 16-colour one included, while agents stream
            app.send("t")
            app.wait_for("theme: ", what="the theme toast")
        _no_stylesheet_error(app)
        before = int(re.search(r"(\d+)/8000", app.text()).group(1))
        app.wait_for(lambda t: (m := re.search(r"(\d+)/8000", t)) is not None
                     and int(m.group(1)) > before and "RUNNING" in t,
                     what="the run still moving after the theme changes")
        _quit_live_run(app)
    finally:
        app.kill()


def test_a_canary_action_after_the_run_ended_is_applied(env):
    from tests.conftest import swarm

    app = PtyApp("run", "--demo", "300", "--rate", "0", "--canary-demo", env=env,
                 cols=100, rows=30)
    try:
        app.wait_for("FINISHED", timeout=60, what="the run's end")
        app.send("g")
        app.wait_for("canary sim->sim-canary", what="the canary panel")
        app.send("z")  # pause, confirmed with a reason, after the run (and its loop) ended
        app.wait_for("reason", what="the pause form")
        app.send("after the run\r")
        app.wait_for("canary pause done", what="the action's toast")
        app.wait_for("PAUSED", what="the panel showing the stored, paused canary")
        _no_stylesheet_error(app)
        app.send("\x1b")
        app.wait_for(lambda t: "FINISHED" in t, what="the dashboard again")
        app.send("q")
        assert app.wait(30) in (0, 3)
    finally:
        app.kill()
    history = swarm("canary", "history", "--json", env=env)
    assert "after the run" in history.stdout, (history.stdout, history.stderr)


def test_the_console_demo_is_paced_with_two_keys(env):
    """Bare `run --demo` in a terminal: 2,000 tasks paced over ~25 s on two demo keys (the
    team's 100-task demo is over in a second: nothing to watch)."""
    app = PtyApp("run", "--demo", env=env, cols=120, rows=30)
    try:
        screen = app.wait_for(lambda t: (m := re.search(r"(\d+)/2000", t)) is not None
                              and int(m.group(1)) >= 40, what="the paced demo under way")
        assert "RUNNING" in screen and re.search(r"keys? ?[12]/2", screen), screen
        _quit_live_run(app)
    finally:
        app.kill()


def test_a_console_run_stopped_at_the_budget_cap_ends_4(env):
    """The console's endings follow the one exit-code table (README): budget stop → 4."""
    app = PtyApp("run", "--demo", "400", "--rate", "0", "--concurrency", "10",
                 "--budget", "0.02", env=env, cols=120, rows=30)
    try:
        app.wait_for("BUDGET_STOPPED", timeout=60, what="the budget stop")
        app.send("q")
        assert app.wait(30) == 4
    finally:
        app.kill()
    assert "budget" in app.raw.decode(errors="replace").lower()


@pytest.mark.parametrize("with_dialog", [False, True], ids=["live", "dialog-open"])
def test_a_console_whose_terminal_goes_away_exits_and_keeps_its_run(env, with_dialog):
    """The terminal itself goes (tmux kill-session, a closed window: the pty's master is
    closed) — not a signal sent by hand. The console cancels what runs, stores it resumable
    and exits within seconds, 129; with a dialog open too (six consoles closed so were alive
    an hour later, one spinning at 76 % of a core)."""
    import json

    from tests.conftest import swarm

    app = PtyApp("run", "--demo", "8000", "--concurrency", "20", "--sim-profile",
                 "fixed:3000", env=env)
    try:
        app.wait_for(lambda t: "RUNNING" in t, what="a running swarm")
        if with_dialog:
            app.send("q")
            app.wait_for(lambda t: "Quit" in t or "quit" in t, what="the quit dialog")
        # within seconds: storing the cancelled run, then 2 s; whatever happens, the 20 s
        # backstop from the hang-up (a starved one-core run took longer than 10 s to store)
        assert app.hang_up(timeout=25) == 129, app.returncode
    finally:
        app.kill()
    runs = json.loads(swarm("runs", "--json", env=env).stdout)
    assert runs[0]["status"] == "cancelled" and runs[0]["done"] < 8000


_COLOUR_PARAMS = {*range(30, 38), *range(40, 48), *range(90, 98), *range(100, 108)}


def _sets_a_colour(params: bytes) -> bool:
    """An SGR sequence that sets a colour: 30–37/40–47/90–97/100–107, or 38/48 (256 and
    truecolour); 39/49 (the default colours) and attributes are not colours."""
    codes = [int(p) for p in re.split(rb"[;:]", params) if p]
    return any(c in _COLOUR_PARAMS or c in (38, 48) for c in codes)


def _footer(app: PtyApp) -> str:
    return app.text().splitlines()[-1]


def test_k9s_hands_command_line_and_ctrl_c_on_a_live_run(env, tmp_path):
    """`:` opens the command line (`:runs` is the history, `:q` asks on a live run); Ctrl-C
    asks on a live run like q; `d` describes the selected agent, as in k9s."""
    seed = PtyApp("run", "--demo", "20", "--rate", "0", "--headless", env=env)
    assert seed.wait(60) in (0, 3)  # a stored run for the history
    seed.kill()
    app = PtyApp("run", "--demo", "8000", "--concurrency", "20", env=env)
    try:
        app.wait_for(lambda t: "RUNNING" in t, what="a running swarm")
        app.send(":")
        app.wait_for(":runs :keys", what="the command line")
        app.send("ru\r")  # a unique prefix
        app.wait_for("Runs (newest first)", what="the history from :runs")
        app.send("\x1b")
        app.wait_for(lambda t: "Runs (newest first)" not in t, what="back to the dashboard")
        app.send(":")
        app.wait_for(":runs :keys", what="the command line again")
        app.send("q\r")
        app.wait_for("Cancel it and quit?", what=":q asking on a live run")
        app.send("n")
        app.wait_for(lambda t: "Cancel it and quit?" not in t, what="the question gone")
        _quit_live_run(app, "\x03")  # Ctrl-C
    finally:
        app.kill()


def test_ctrl_c_on_an_idle_console_quits_at_once(env):
    app = PtyApp(env=env)
    try:
        app.wait_for("press D (or :demo) to start", what="the idle console")
        app.send("\x03")
        assert app.wait(30) == 0
    finally:
        app.kill()


def test_a_read_only_console_offers_no_controls_and_no_color_sends_no_colour(env):
    """The footer of a read-only console has no Pause, +Conc, -Conc or Cancel run (their
    keys still say why); with NO_COLOR not one colour code reaches the terminal."""
    app = PtyApp("--readonly", "run", "--demo", "3000", env={**env, "NO_COLOR": "1"})
    try:
        app.wait_for(lambda t: "RUNNING" in t, what="a running swarm")
        footer = _footer(app)
        assert "Help" in footer and "Quit" in footer, footer
        for refused in ("Pause", "Conc", "Cancel run"):
            assert refused not in footer, footer
        app.send("p")
        app.wait_for("read-only console", what="p answering in words")
        sgr = re.findall(rb"\x1b\[([0-9;:]*)m", bytes(app.raw))
        coloured = [c for c in sgr if _sets_a_colour(c)]
        assert sgr and not coloured, coloured[:5]
        _quit_live_run(app)
    finally:
        app.kill()


@pytest.mark.timeout(150)
def test_the_console_demo_cools_a_key_and_keeps_its_sla(env):
    """The demo does what the README says: demo-key-a's quota runs out 8 s in, the keys
    panel counts its cooldown down while demo-key-b takes the traffic, and the demo's
    gateway still meets the SLA — exit 0 (issue 36)."""
    # the console demo with its incidents, paced at twice its rate (12.5 s instead of 25:
    # the quota still runs out 8 s in)
    app = PtyApp("run", "--demo", "--rate", "160", env=env)
    try:
        app.wait_for(lambda t: "RUNNING" in t, what="the demo running")
        app.send("k")
        screen = app.wait_for(lambda t: re.search(r"cooling \d+s to \d\d:\d\d:\d\d", t)
                              is not None, timeout=60, what="a key cooling, counting down")
        cooled = [row for row in screen.splitlines() if "cooling" in row]
        assert len(cooled) == 1 and "demo-key-a" in cooled[0], screen
        app.send("\x1b")
        app.wait_for("FINISHED", timeout=90, what="the demo's end")
        app.send("q")
        code = app.wait(30)
        out = bytes(app.raw).decode(errors="replace")
        verdict = out[out.rfind("SIMULATED run"):] if "SIMULATED run" in out else out[-2000:]
        # the demo's gateway keeps the SLA's success (what the demo scripts); its latency
        # is the machine's to judge — three test workers on one core took p95 to 371 ms
        # once, so a breach of p95 alone (exit 3) is the machine, not the demo
        assert re.search(r"call success [\d.]+% <", verdict) is None, verdict
        assert code == 0 if "SLA met" in verdict or "inconclusive" in verdict else (
            code == 3 and "SLA BREACHED: p95" in verdict), (code, verdict)
    finally:
        app.kill()


@pytest.mark.timeout(150)
def test_resume_on_a_terminal_opens_the_console_on_the_same_run(env):
    """`resume` on a terminal is watched live as `run` is (it had no console flags and no
    console): the cancelled run goes on under its own id to every task (issue 36)."""
    import json

    from tests.conftest import swarm

    first = PtyApp("run", "--demo", "1500", "--concurrency", "20", "--rate", "0",
                   "--no-sim-incidents", env=env)
    try:
        first.wait_for(lambda t: (m := re.search(r"(\d+)/1500", t)) is not None
                       and int(m.group(1)) >= 50, what="some finished tasks")
        _quit_live_run(first)
    finally:
        first.kill()
    run_id = json.loads(swarm("runs", "--json", env=env).stdout)[0]["id"]
    app = PtyApp("resume", "last", "--theme", "swarm-ansi", env=env, cols=160, rows=40)
    try:
        app.wait_for(lambda t: "RUNNING" in t or "FINISHED" in t,
                     what="the resumed run in the console")
        assert f"resuming run {run_id}".encode() in app.raw  # under its own id
        app.wait_for("FINISHED", timeout=120, what="the resumed run's end")
        app.send("q")
        assert app.wait(30) in (0, 3)  # 3: the SLA verdict of a slow machine's latency
    finally:
        app.kill()
    report = json.loads(swarm("report", run_id, "--json", env=env).stdout)
    assert report["succeeded"] == 1500 and report["status"] == "finished", report


def test_a_key_typed_fast_into_the_add_form_lands_in_its_fields(env):
    """Key, enter and label sent in one write, as a fast typist or a paste does: the
    label went into the secret field when focus moved after the keys (issue 36)."""
    app = PtyApp("run", "--demo", "8000", "--concurrency", "20", env=env, cols=120, rows=30)
    try:
        app.wait_for(lambda t: "RUNNING" in t, what="a running swarm")
        app.send("k")
        app.wait_for("API keys (fingerprints only)", what="the keys panel")
        app.send("a")
        app.wait_for("Add an API key", what="the add form")
        # the form starts on the key (the gateway is filled in); all of it in one write
        app.send("sk-fasttyped-0123456789abcdef\rfastlabel\r")
        # a row of the keys table (label, then its state), not the form being redrawn
        screen = app.wait_for(lambda t: re.search(r"fastlabel\s+active", t) is not None,
                              what="the new key's row in the panel")
        assert "fasttyped" not in screen and "0123456789abcdef" not in screen
        row = next(line for line in screen.splitlines() if "fastlabel" in line)
        assert "sk-…cdef#" in row, row  # the key went to the secret field: its fingerprint
        app.send("\x1b")
        app.wait_for(lambda t: "API keys (fingerprints only)" not in t, what="the dashboard")
        _quit_live_run(app)
    finally:
        app.kill()


def test_a_dumb_terminal_gets_plain_lines_and_no_console(env):
    """TERM=dumb (Emacs' shell, some CI consoles) draws nothing: a run there prints plain
    progress lines and its summary, with no control sequence at all; a console command is
    one line and exit 2 instead of a screen of escapes waiting for keys."""
    app = PtyApp("run", "--demo", "600", "--concurrency", "20", env=env, term="dumb")
    try:
        app.wait_for("SLA ", timeout=60, what="the run's summary")
        assert app.wait(60) in (0, 3)
        assert b"\x1b" not in app.raw, bytes(app.raw[:300])
        assert b"in-flight" in app.raw  # its progress, as lines
    finally:
        app.kill()
    app = PtyApp("replay", "last", env=env, term="dumb")
    try:
        assert app.wait(30) == 2
        assert b"\x1b" not in app.raw
        assert re.search(rb"error: the console needs a terminal \(TERM=dumb here draws nothing\)"
                         rb".*`run --headless`", app.raw, re.S), bytes(app.raw)
    finally:
        app.kill()
