"""The command line as a user runs it: a real process, real exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import TEST_KEY, assert_one_line_error, free_port, swarm


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_demo_json_contract():
    r = swarm("run", "--demo", "40", "--headless", "--json", "--sim-rate-429", "0",
              "--sim-rate-503", "0")
    assert r.returncode in (0, 3), r.stderr
    out = json.loads(r.stdout)
    for key in ("run_id", "total", "succeeded", "failed", "cancelled", "wall_ms", "latency_ms",
                "ttft_ms", "tokens", "cost_usd", "by_model", "by_gateway", "by_bucket"):
        assert key in out
    assert out["simulated"] is True and out["total"] == 40 and out["succeeded"] == 40
    assert set(out["latency_ms"]) >= {"p50", "p95", "p99"}
    assert out["tokens"]["input"] > 0 and out["tokens"]["output"] > 0
    assert out["by_gateway"]["sim"]["succeeded"] == 40
    assert out["by_bucket"]["baseline"]["total"] == 40
    for group in out["by_model"].values():
        assert set(group) >= {"total", "succeeded", "latency_ms", "ttft_ms", "tokens", "cost_usd"}
    assert (r.returncode == 0) == out["sla"]["met"]


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_summary_line_and_sla_breach_exit_code():
    r = swarm("run", "--demo", "30", "--headless", "--sim-profile", "fixed:400",
              "--sim-rate-429", "0", "--sim-rate-503", "0")
    assert r.returncode == 3, r.stderr
    assert r.stdout.startswith("SIMULATED run ")
    assert "30/30 succeeded" in r.stdout and "SLA BREACHED: p95" in r.stdout


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
@pytest.mark.parametrize("as_json", [False, True])
def test_a_reader_that_left_does_not_turn_a_breach_into_success(as_json):
    """`swarm-tui run … | head -1` under `set -o pipefail`: the run was paid for and
    breached its SLA; the summary finds no reader, and the exit code still says 3."""
    flags = ["--json"] if as_json else []
    p = subprocess.Popen([sys.executable, "-m", "swarm_tui", "run", "--demo", "30",
                          "--headless", "--quiet", "--sim-profile", "fixed:400",
                          "--sim-rate-429", "0", "--sim-rate-503", "0", *flags],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the summary is printed
    err = p.stderr.read().decode()
    assert p.wait(timeout=90) == 3, err
    assert "Traceback" not in err
    listed = swarm("runs", "--json")
    assert listed.returncode == 0, listed.stderr
    run = json.loads(listed.stdout)[0]  # stored whole: 30 of 30, p95 past 350 ms
    assert (run["status"], run["done"], run["total"]) == ("finished", 30, 30)
    assert run["p95_ms"] > 350


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_a_latin_1_locale_gets_the_verdict_and_its_exit_code():
    """A bastion with `LANG=en_US` (ISO-8859-1): the summary's `≤` raised
    UnicodeEncodeError after the run was paid for — exit 1, no verdict. The output is
    UTF-8 whatever the locale (as Python's UTF-8 mode), and the code says the breach."""
    r = subprocess.run([sys.executable, "-m", "swarm_tui", "run", "--demo", "30", "--headless",
                        "--sim-profile", "fixed:400", "--sim-rate-429", "0",
                        "--sim-rate-503", "0"], capture_output=True, timeout=90,
                       stdin=subprocess.DEVNULL,
                       env={**os.environ, "PYTHONIOENCODING": "latin-1"})
    assert r.returncode == 3, r.stderr
    out = r.stdout.decode("utf-8")
    assert "SLA BREACHED: p95" in out and "≤ 350 ms" in out


@pytest.mark.usefixtures("no_user_config")
def test_bad_config_exit_2(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[retry]\nmax_attempts = 'x'\n")
    r = swarm("run", "--demo", "1", "--headless", "--config", str(cfg))
    assert_one_line_error(r, 2, str(cfg), "retry.max_attempts")


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_bad_workload_line_exit_2_and_nothing_sent(tmp_path):
    w = tmp_path / "w.jsonl"
    w.write_text('{"id": "a", "prompt": "x"}\n{"id": "b"}\n')
    r = swarm("run", str(w), "--headless")
    assert r.returncode == 2
    assert f"{w}:2: prompt: Field required" in r.stderr
    assert "nothing sent" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""
    r2 = swarm("run", str(w), "--headless", "--skip-bad-lines", "--json", "--quiet")
    assert r2.returncode in (0, 3), r2.stderr
    assert json.loads(r2.stdout)["total"] == 1


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_unreachable_gateway_exit_2(tmp_path):
    cfg = tmp_path / "c.toml"
    port = free_port()
    cfg.write_text(f'[gateways.gw]\nbase_url = "http://127.0.0.1:{port}/v1"\nkey_env = ["GW_KEY"]\n'
                   "timeout_s = 3\n")
    r = swarm("run", "--demo", "2", "--headless", "--config", str(cfg), env={"GW_KEY": TEST_KEY})
    assert_one_line_error(r, 2, "gateway 'gw'", "unreachable")
    assert TEST_KEY not in r.stderr + r.stdout


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_wrong_key_exit_2_without_the_key(tmp_path, sim_factory):
    server = sim_factory(profile="fixed:5", keys=["sk-good-000000000000000000000"])
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[gateways.gw]\nbase_url = "{server.base_url}"\nkey_env = ["GW_KEY"]\n')
    r = swarm("run", "--demo", "2", "--headless", "--config", str(cfg), env={"GW_KEY": TEST_KEY})
    assert_one_line_error(r, 2, "gateway 'gw'", "rejected (401)", "sk-…")
    assert TEST_KEY not in r.stderr + r.stdout


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_missing_key_and_unknown_gateway(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[gateways.gw]\nbase_url = "http://127.0.0.1:9/v1"\nkey_env = ["NO_SUCH_VAR"]\n')
    r = swarm("run", "--demo", "2", "--headless", "--config", str(cfg))
    assert_one_line_error(r, 2, "gateway 'gw'", "$NO_SUCH_VAR")
    r = swarm("run", "--demo", "2", "--headless", "--config", str(cfg), "--gateway", "other")
    assert_one_line_error(r, 2, "--gateway other", "known: gw, sim")


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_run_against_a_configured_gateway_in_another_process(tmp_path):
    port = free_port()
    sim = subprocess.Popen([sys.executable, "-m", "swarm_tui", "sim", "--port", str(port),
                            "--profile", "fixed:20"], stdout=subprocess.PIPE, text=True,
                           stdin=subprocess.DEVNULL)
    try:
        assert "SIMULATED" in sim.stdout.readline()
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[gateways.local]\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                       'key_env = ["GW_KEY"]\n')
        w = tmp_path / "w.jsonl"
        w.write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"p {i}", "max_tokens": 20})
                             + "\n" for i in range(25)))
        r = swarm("run", str(w), "--gateway", "local", "--concurrency", "10", "--headless",
                  "--json", "--config", str(cfg), env={"GW_KEY": TEST_KEY})
        out = json.loads(r.stdout)
        assert out["succeeded"] == 25 and out["simulated"] is False
        assert list(out["by_gateway"]) == ["local"]
    finally:
        sim.terminate()
        sim.wait(10)


@pytest.mark.usefixtures("no_user_config")
def test_bad_sim_flags():
    r = swarm("run", "--demo", "2", "--headless", "--sim-profile", "fixed:-3")
    assert_one_line_error(r, 2, "simulator flags", "profile")


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.parametrize("argv", [["runs", "--limit", "-1"], ["runs", "--limit", "0"],
                                  ["canary", "history", "--limit", "-5"]], ids=" ".join)
def test_a_limit_below_one_is_refused_at_the_flag(tmp_path, argv):
    """SQLite reads LIMIT -1 as "every row", PostgreSQL refuses it: the flag says so first."""
    r = swarm(*argv, "--db", str(tmp_path / "none.db"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith("argument --limit: 1 or more, not "
                                                      + argv[-1]), r.stderr


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.slow
def test_watch_errors_are_one_line_before_the_console_starts(tmp_path):
    db = tmp_path / "w.db"
    swarm("run", "--demo", "2", "--headless", "--quiet", "--db", str(db))
    r = swarm("watch", "--db", str(db), timeout=30)
    assert_one_line_error(r, 2, "no running run to watch")
    r = swarm("watch", "nope", "--db", str(db), timeout=30)
    assert_one_line_error(r, 2, "run nope: not found")
    run_id = json.loads(swarm("runs", "--json", "--db", str(db)).stdout)[0]["id"]
    r = swarm("watch", run_id, "--theme", "nope", "--db", str(db), timeout=30)
    assert_one_line_error(r, 2, "theme nope: unknown")


def test_every_option_and_argument_says_what_it_does():
    import argparse

    from swarm_tui.cli import build_parser

    missing = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    walk(sub, f"{name} {sub_name}")
            elif not action.help:
                missing.append(f"{name} {action.option_strings or action.dest}")

    walk(build_parser(), "swarm-tui")
    assert not missing, missing


@pytest.mark.slow
def test_call_success_is_shown_next_to_task_success_and_judged_by_the_sla(tmp_path):
    """The team measures success per call (96.8 % direct): retries rescue tasks, so task
    success reads ~100 % while calls fail 3.2 % — both are reported, the SLA judges calls."""
    import json

    env = {"SWARM_TUI_DB": str(tmp_path / "runs.db")}
    args = ("run", "--demo", "2000", "--headless", "--json", "--quiet", "--concurrency", "50",
            "--sim-profile", "fixed:20", "--sim-rate-429", "0.016", "--sim-rate-503", "0.016",
            "--sim-seed", "3")
    r = swarm(*args, env=env, timeout=180)
    s = json.loads(r.stdout)
    assert s["calls"] > 2000 and s["success_rate"] > 0.999
    assert abs(s["call_success_rate"] - 0.968) < 0.015, s["call_success_rate"]
    assert r.returncode == 3 and s["sla"]["success_basis"] == "call"
    assert any(b.startswith("call success") for b in s["sla"]["breaches"])
    text = swarm("report", s["run_id"], env=env).stdout
    assert "ok per call" in text and "call success ≥ 99%" in text
    listing = swarm("runs", env=env).stdout
    assert "CALL%" in listing
    # the team may judge tasks instead: the same run's figures then meet the SLA
    r2 = swarm(*args, env={**env, "SWARM_TUI__SLA__SUCCESS_BASIS": "task"}, timeout=180)
    s2 = json.loads(r2.stdout)
    # (latency may still breach on a loaded machine: only the success verdict is asserted)
    assert s2["sla"]["success_basis"] == "task"
    assert not any("success" in b for b in s2["sla"]["breaches"]), s2["sla"]


def test_shell_completion_from_the_parser(tmp_path):
    """`swarm-tui completion bash|zsh|fish` prints a script each shell takes; the parser
    answers what a shell asks (argcomplete's protocol), without running anything."""
    import shutil

    for shell in ("bash", "zsh", "fish"):
        r = swarm("completion", shell)
        assert r.returncode == 0 and "swarm-tui" in r.stdout, (shell, r.stderr)
    bash = shutil.which("bash")
    if bash is not None:  # the script loads in a real bash and registers the completion
        script = swarm("completion", "bash").stdout
        r = subprocess.run([bash, "-c", f"{script}\ncomplete -p swarm-tui"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "swarm-tui" in r.stdout, r.stderr

    def complete(line: str) -> set[str]:
        out = tmp_path / "completions"
        r = swarm(env={"_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
                       "_ARGCOMPLETE_STDOUT_FILENAME": str(out), "_ARGCOMPLETE_IFS": "\n"})
        assert r.returncode == 0, r.stderr
        return {w.strip() for w in out.read_text().split("\n")} - {""}

    assert complete("swarm-tui ru") == {"run", "runs"}
    assert "--sim-profile" in complete("swarm-tui run --sim-pr")
    assert complete("swarm-tui completion ") >= {"bash", "zsh", "fish"}


@pytest.mark.usefixtures("no_user_config")
def test_a_console_without_a_terminal_is_one_line_not_a_hang(tmp_path):
    """`watch` / `replay` under nohup, cron or a pipe: the console once filled the log
    with its screen's control sequences and waited for keys until killed."""
    db = tmp_path / "t.db"
    swarm("run", "--demo", "2", "--headless", "--quiet", "--db", str(db))
    for argv in (["replay", "last"], ["watch", "last"]):
        r = swarm(*argv, "--db", str(db), timeout=60)
        assert_one_line_error(r, 2, "the console needs a terminal (its keys come from "
                              "standard input and it draws on standard error: here one of "
                              "them is not a terminal)", "report RUN")
        assert "\x1b" not in r.stdout + r.stderr
