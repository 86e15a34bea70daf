"""The on-call toolbox: Prometheus /metrics scraped from a real run, webhook alerts to a
local receiver, OpenTelemetry spans to a local OTLP/HTTP receiver."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import TEST_KEY, free_port, swarm

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def env(tmp_path):
    return {"SWARM_TEST_KEY": TEST_KEY, "SWARM_TUI_DB": str(tmp_path / "runs.db"),
            "XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def wait_until(check: Callable[[], object], timeout: float = 60, what: str = "") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or check}")


# -- Prometheus --------------------------------------------------------------------------
def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()
    except OSError:
        return None


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(text: str, name: str, **match: str) -> float:
    return sum(v for (n, labels), v in samples(text).items()
               if n == name and all(dict(labels).get(k) == m for k, m in match.items()))


NON_BASE_UNITS = re.compile(r"_(milli|micro|nano)seconds|_(ms|us|ns|minutes|hours|days|percent|"
                            r"kilobytes|megabytes)(_|$)")


def promlint(text: str) -> list[str]:
    """The checks `promtool check metrics` makes (client_golang's promlint), on the
    exposition: naming, units, counter suffixes, help, histogram shape, reserved labels."""
    problems = []
    for fam in text_string_to_metric_families(text):
        name = fam.name
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            problems.append(f"{name}: not snake_case")
        if not fam.documentation:
            problems.append(f"{name}: no help text")
        if NON_BASE_UNITS.search(name + "_"):
            problems.append(f"{name}: use base units (seconds, bytes, ratio)")
        if fam.type == "counter":
            if any(not s.name.endswith(("_total", "_created")) for s in fam.samples):
                problems.append(f"{name}: counter samples must end in _total")
        elif name.endswith("_total"):
            problems.append(f"{name}: non-counter named _total")
        for s in fam.samples:
            for label in s.labels:
                if label.startswith("__") or (label == "le" and fam.type != "histogram"):
                    problems.append(f"{name}: reserved label {label}")
        if fam.type == "histogram":
            series: dict[tuple, list[tuple[float, float]]] = {}
            counts = {}
            for s in fam.samples:
                rest = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                if s.name.endswith("_bucket"):
                    series.setdefault(rest, []).append((float(s.labels["le"]), s.value))
                elif s.name.endswith("_count"):
                    counts[rest] = s.value
            for rest, buckets in series.items():
                les = [le for le, _ in buckets]
                values = [v for _, v in buckets]
                if les != sorted(les) or les[-1] != float("inf"):
                    problems.append(f"{name}{rest}: buckets unsorted or no +Inf")
                if values != sorted(values) or values[-1] != counts.get(rest):
                    problems.append(f"{name}{rest}: buckets not cumulative / _count differs")
    return problems


def assert_agrees_with_stored(final: str, stored: dict, err: str = "") -> None:
    """A final scrape's counters against the run's stored figures (`run --json`)."""
    assert promlint(final) == []
    states = ("succeeded", "failed", "cancelled")
    scraped = {s: total(final, "swarm_tui_tasks_total", state=s) for s in states}
    assert scraped == {s: stored[s] for s in states}, err
    assert total(final, "swarm_tui_calls_total") == stored["calls"]
    assert total(final, "swarm_tui_calls_total", outcome="error", error_class="server") > 0
    ok_calls = total(final, "swarm_tui_calls_total", outcome="ok")
    assert ok_calls == round(stored["calls"] * stored["call_success_rate"])
    assert total(final, "swarm_tui_cost_usd_total") == pytest.approx(stored["cost_usd"],
                                                                       rel=1e-9)
    assert total(final, "swarm_tui_tokens_total", direction="input") == stored["tokens"]["input"]
    assert total(final, "swarm_tui_call_latency_seconds_count") == ok_calls


@pytest.mark.slow
def test_metrics_scraped_during_a_run_match_its_stored_figures(env):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm_tui", "run", "--demo", "1500", "--headless", "--json",
         "--concurrency", "20", "--sim-profile", "fixed:80", "--sim-rate-503", "0.05",
         "--sim-rate-429", "0", "--rate", "300", "--metrics-port", str(port),
         "--metrics-linger", "60"],
        env={**__import__("os").environ, **env}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        # during the run: tasks counted, calls in flight, not ended
        during = wait_until(lambda: (t := scrape(port)) and total(t, "swarm_tui_tasks_total")
                            and total(t, "swarm_tui_run_ended") == 0 and t, what="a live scrape")
        assert isinstance(during, str)
        assert total(during, "swarm_tui_concurrency_limit") == 20
        assert total(during, "swarm_tui_run_info", simulated="true") == 1
        assert promlint(during) == []
        # the run ends; the process stays until one scrape has read the final figures
        final = wait_until(lambda: (t := scrape(port)) and total(t, "swarm_tui_run_ended") == 1
                           and t, what="the final scrape")
        assert isinstance(final, str)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode in (0, 3), err  # 3: 5 % of calls fail the 99 % SLA
    stored = json.loads(out)
    assert_agrees_with_stored(final, stored, err)
    ok_calls = total(final, "swarm_tui_calls_total", outcome="ok")
    # the console's buckets: ≤ 100 ms holds every call of an 80 ms server on an idle machine,
    # so only its existence and order are asserted (a loaded machine adds client time)
    assert total(final, "swarm_tui_call_latency_seconds_bucket", le="0.35") <= ok_calls
    assert total(final, "swarm_tui_calls_in_flight") == 0
    # bounded labels: no task id, no key (the simulator's key starts sk-sim-)
    assert "demo-0" not in final and "sk-sim-" not in final


@pytest.mark.slow
def test_a_watcher_serves_the_run_it_follows_as_metrics(env):
    """`watch RUN --headless --metrics-port`: the counters, read from the stored rows by
    another process, agree with the executor's own figures at the end."""
    run = subprocess.Popen(
        # paced to ~12 s: the watcher must meet it live even on a slow machine (at ~5 s
        # a fresh clone on one core once saw the run end before the watcher's first scrape)
        [sys.executable, "-m", "swarm_tui", "run", "--demo", "1200", "--headless", "--json",
         "--concurrency", "20", "--sim-profile", "fixed:80", "--sim-rate-503", "0.05",
         "--sim-rate-429", "0", "--rate", "100"],
        env={**__import__("os").environ, **env}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    port = free_port()
    watch = None
    try:
        seen: list[str] = []

        def running() -> str | None:
            if run.poll() is not None:  # it ended before a poll saw it: say how
                raise AssertionError(f"the run ended first ({run.returncode}): "
                                     f"{run.stderr.read() if run.stderr else ''}; runs: {seen}")
            r = swarm("runs", "--json", env=env)
            seen[:] = [f"{r.returncode} {r.stdout[:200]} {r.stderr[:300]}"]
            rows = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else []
            return next((x["id"] for x in rows if x["status"] == "running"), None)

        run_id = wait_until(running, what="the run to be stored as running (last `runs`: "
                            f"{seen})")
        assert isinstance(run_id, str)
        watch = subprocess.Popen(
            [sys.executable, "-m", "swarm_tui", "watch", run_id, "--headless",
             "--metrics-port", str(port), "--metrics-linger", "60"],
            env={**__import__("os").environ, **env}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        def live_scrape() -> str | None:
            # a scrape can land between a tick's counted rows and its gauges: wait for both
            t = scrape(port)
            if t and total(t, "swarm_tui_run_ended") == 1:  # say so now, not in 60 s
                raise AssertionError("the run ended before the watcher scraped it live")
            return t if t and total(t, "swarm_tui_tasks_total") and total(
                t, "swarm_tui_concurrency_limit") == 20 and total(
                t, "swarm_tui_run_ended") == 0 else None

        during = wait_until(live_scrape, what="a live scrape of the watcher")
        assert isinstance(during, str)
        assert total(during, "swarm_tui_run_info", run_id=run_id, simulated="true") == 1
        assert promlint(during) == []
        out, err = run.communicate(timeout=90)
        assert run.returncode in (0, 3), err
        final = wait_until(lambda: (t := scrape(port)) and total(t, "swarm_tui_run_ended") == 1
                           and t, what="the watcher's final scrape")
        assert isinstance(final, str)
        _, werr = watch.communicate(timeout=60)
        assert watch.returncode == 0, werr
        assert f"127.0.0.1:{port}/metrics" in werr
    finally:
        run.kill()
        if watch is not None:
            watch.kill()
    assert_agrees_with_stored(final, json.loads(out))
    assert total(final, "swarm_tui_tasks_remaining") == 0
    assert "demo-0" not in final and "sk-sim-" not in final


@pytest.mark.slow
def test_watch_headless_without_a_metrics_port_is_one_line(env):
    r = swarm("watch", "--headless", env=env)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "swarm-tui: error: watch --headless: nothing to do without --metrics-port (the console is "
        "the other way to watch)"]


@pytest.mark.slow
def test_a_busy_metrics_port_is_one_line_before_the_run(env):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = swarm("run", "--demo", "5", "--headless", "--metrics-port", str(port), env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"--metrics-port {port}: cannot listen" in r.stderr.strip().splitlines()[-1]


# -- alerts ------------------------------------------------------------------------------
def _alert_config(tmp_path, url: str, extra: str = "") -> str:
    path = tmp_path / "alerts.toml"
    path.write_text(f"""
[[alerts.webhooks]]
name = "oncall"
url = "{url}/hook"
[[alerts.webhooks]]
name = "chat"
url = "{url}/slack"
format = "slack"
events = ["budget_stop", "canary_abort"]
[alerts]
attempts = 2
drain_s = 3
{extra}
""")
    path.chmod(0o600)  # it holds the webhooks' URLs
    return str(path)


def _events(env, run_id: str) -> list[str]:
    import sqlite3

    with sqlite3.connect(env["SWARM_TUI_DB"]) as c:
        return [row[0] for row in c.execute(
            "SELECT detail_json FROM events WHERE run_id=? AND detail_json IS NOT NULL "
            "ORDER BY id", (run_id,))]


@pytest.mark.slow
def test_one_alert_per_budget_stop_delivered_and_recorded(tmp_path, env, receiver):
    cfg = _alert_config(tmp_path, f"http://127.0.0.1:{receiver.port}")
    r = swarm("run", "--demo", "400", "--headless", "--json", "--quiet", "--config", cfg,
              "--budget", "0.05", "--concurrency", "10", "--sim-profile", "fixed:30",
              env=env)
    assert r.returncode == 4, r.stderr  # stopped at the budget cap
    run_id = json.loads(r.stdout)["run_id"]
    kinds = [a["kind"] for a in receiver.json()]
    assert kinds.count("budget_stop") == 1 and kinds.count("budget_80") == 1, kinds
    assert kinds[-1] == "run_interrupted"  # the run's end, after the stop
    stop = next(a for a in receiver.json() if a["kind"] == "budget_stop")
    assert stop["run_id"] == run_id and stop["severity"] == "warning"
    assert stop["details"]["cap_usd"] == 0.05 and stop["details"]["unsent"] > 0
    slack = receiver.json("/slack")  # this webhook takes only budget_stop / canary_abort
    assert len(slack) == 1 and "budget cap $0.0500 reached" in slack[0]["text"]
    events = " ".join(_events(env, run_id))
    assert "alert budget_stop → oncall: delivered (HTTP 200" in events
    assert "alert budget_stop → chat: delivered" in events
    assert f"127.0.0.1:{receiver.port}" not in events  # a webhook URL is a credential


@pytest.mark.slow
def test_a_receiver_named_in_an_unset_variable_is_said_when_the_run_starts(tmp_path, env,
                                                                          sim_proc):
    """`url_env` / `routing_key_env` naming a variable this shell lacks: paging is off for
    that receiver, said at the start (stderr and the run's log), not at the 3 a.m. alert
    it would have failed to deliver. The run itself goes on."""
    _port, gateway = sim_proc  # a gateway in its own process: workers too can reach it
    env = {**env, "GW_KEY": TEST_KEY}
    cfg = tmp_path / "pager.toml"
    cfg.write_text(gateway.read_text() +
                   '[[alerts.webhooks]]\nname = "pager"\nurl_env = "NO_SUCH_HOOK_URL"\n'
                   '[[alerts.webhooks]]\nname = "pd"\nformat = "pagerduty"\n'
                   'url = "http://127.0.0.1:9/enqueue"\nrouting_key_env = "NO_SUCH_PD_KEY"\n'
                   "[alerts]\nattempts = 1\ndrain_s = 1\n")
    cfg.chmod(0o600)  # it holds a webhook's URL
    said = [
        "swarm-tui: warning: alerts: webhook 'pager': $NO_SUCH_HOOK_URL is not set; its "
        "alerts will not be delivered",
        "swarm-tui: warning: alerts: webhook 'pd': $NO_SUCH_PD_KEY is not set; its alerts "
        "will not be delivered"]
    # --quiet silences progress, not this; with workers, said once by their starter
    for flags in ([], ["--quiet"], ["--quiet", "--workers", "2"]):
        r = swarm("run", "--demo", "5", "--headless", "--json", "--config", str(cfg),
                  *flags, env=env)
        assert r.returncode == 0, r.stderr
        assert [ln for ln in r.stderr.splitlines() if "is not set" in ln] == said, flags
        events = _events(env, json.loads(r.stdout)["run_id"])
        assert "preflight: alerts: webhook 'pager': $NO_SUCH_HOOK_URL is not set; its " \
               "alerts will not be delivered" in events, flags
    r = swarm("run", "--demo", "5", "--headless", "--json", "--config", str(cfg),
              env={**env, "NO_SUCH_HOOK_URL": "http://127.0.0.1:9/hook",
                   "NO_SUCH_PD_KEY": "pd-key-0123456789"})
    assert r.returncode == 0 and "is not set" not in r.stderr, r.stderr


@pytest.mark.slow
def test_a_receiver_that_is_down_never_fails_or_holds_the_run(tmp_path, env):
    dead = free_port()  # nothing listens there
    cfg = _alert_config(tmp_path, f"http://127.0.0.1:{dead}")
    started = time.monotonic()
    r = swarm("run", "--demo", "300", "--headless", "--json", "--quiet", "--config", cfg,
              "--concurrency", "20", "--sim-profile", "fixed:30", env=env)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["succeeded"] == 300
    events = " ".join(_events(env, summary["run_id"]))
    assert "alert run_finished → oncall: NOT delivered (cannot connect" in events
    assert "after 2 attempts; the run goes on" in events
    assert time.monotonic() - started < 60  # drain_s bounds the wait at the end


@pytest.mark.slow
@pytest.mark.timeout(480)  # a 4,000-task run: ~10 s here, over 100 s under two busy loops
def test_one_alert_per_canary_abort(tmp_path, env, receiver):
    from swarm_tui.sim.server import SimProcess
    from swarm_tui.sim.settings import SimSettings

    base = SimProcess(SimSettings(profile="fixed:150", rate_429=0, rate_503=0, seed=1)).start()
    cand = SimProcess(SimSettings(profile="fixed:150", rate_429=0, rate_503=0.05,
                                  seed=1)).start()
    try:
        from tests.functional.test_canary_runs import _config

        canary_cfg = _config(tmp_path, base, cand, bake="60s", min_samples=40)
        alerts = _alert_config(tmp_path, f"http://127.0.0.1:{receiver.port}")
        # one file: the canary's and the alerts' sections
        with open(canary_cfg, "a") as f, open(alerts) as a:
            f.write(a.read())
        r = swarm("run", "--demo", "4000", "--model", "deepseek-v3.2", "--headless", "--json",
                  "--quiet", "--config", canary_cfg, env=env, timeout=400)
    finally:
        base.stop()
        cand.stop()
    assert r.returncode in (0, 3), r.stderr
    kinds = [a["kind"] for a in receiver.json()]
    assert kinds.count("canary_abort") == 1, kinds
    abort = next(a for a in receiver.json() if a["kind"] == "canary_abort")
    assert abort["severity"] == "critical" and abort["details"]["pct"] == 0
    assert "aborted at 5%" in abort["summary"]
    assert [a["text"] for a in receiver.json("/slack") if "aborted" in a["text"]]


async def test_an_alert_raised_while_the_run_ends_is_delivered_or_on_record(receiver):
    """Seen on one loaded core: a canary abort landed while the run's end was draining;
    the hook that had a queue never delivered it, and nothing said so."""
    from swarm_tui.core.plain import build
    from swarm_tui.ops.alerts import Alert
    from swarm_tui.ops.webhooks import AlertDelivery
    from swarm_tui.settings.run_sections import AlertKind, AlertsConfig

    url = f"http://127.0.0.1:{receiver.port}"
    cfg = build(AlertsConfig, {"drain_s": 5, "webhooks": [
        {"name": "oncall", "url": f"{url}/hook"},
        {"name": "chat", "url": f"{url}/chat", "events": ["canary_abort"]}]})
    lines: list[str] = []
    delivery = AlertDelivery(cfg, lines.append)
    delivery.send(Alert(AlertKind.RUN_FINISHED, "run finished", "r1"))
    closing = asyncio.create_task(delivery.close())
    # raised after the drain began, to a hook with a queue and to one without
    await asyncio.sleep(0)
    delivery.send(Alert(AlertKind.CANARY_ABORT, "canary aborted at 5%", "r1"))
    assert await closing == 0
    assert [a["kind"] for a in receiver.json()] == ["run_finished", "canary_abort"]
    assert len(receiver.json("/chat")) == 1
    delivery.send(Alert(AlertKind.CANARY_ABORT, "too late", "r1"))  # after the close
    assert [line for line in lines if "too late" in line or "NOT delivered" in line] == [
        "alert canary_abort → oncall: NOT delivered (raised after the run's alerts closed)",
        "alert canary_abort → chat: NOT delivered (raised after the run's alerts closed)"]
    assert delivery.failed == 2 and delivery.delivered == 3


# -- OpenTelemetry ---------------------------------------------------------------------
@pytest.mark.slow
def test_one_span_per_attempt_over_otlp(tmp_path, env, receiver):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    cfg = tmp_path / "otel.toml"
    cfg.write_text(f'[telemetry]\notlp_endpoint = "http://127.0.0.1:{receiver.port}"\n')
    r = swarm("run", "--demo", "120", "--headless", "--json", "--quiet", "--config", str(cfg),
              "--concurrency", "20", "--sim-profile", "fixed:30", "--sim-rate-503", "0.1",
              "--sim-rate-429", "0", env=env)
    assert r.returncode in (0, 3), r.stderr  # 3: 10 % of calls fail the 99 % SLA
    stored = json.loads(r.stdout)
    spans = []
    for path, body in receiver.posts:
        assert path == "/v1/traces"
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                spans += list(ss.spans)
    assert len(spans) == stored["calls"]  # one per attempt, retries included
    attrs = [{a.key: a.value for a in s.attributes} for s in spans]
    assert {s.name for s in spans} <= {"chat kimi-k2.5", "chat deepseek-v3.2"}
    assert all(a["gen_ai.request.model"].string_value in s.name for a, s in zip(attrs, spans,
                                                                                 strict=True))
    assert sum(a["gen_ai.usage.input_tokens"].int_value for a in attrs) == \
        stored["tokens"]["input"]
    failed = [a for a in attrs if "error.type" in a]
    assert failed and all(a["error.type"].string_value == "server" for a in failed)
    # the GenAI conventions' response and request attributes, and the server called
    ok = [a for a in attrs if "error.type" not in a]
    assert ok and all(a["http.response.status_code"].int_value == 200 for a in ok)
    assert all(a["gen_ai.response.id"].string_value.startswith("chatcmpl-") for a in ok)
    assert all(a["gen_ai.response.model"].string_value == a["gen_ai.request.model"].string_value
               for a in ok)
    assert all([v.string_value for v in a["gen_ai.response.finish_reasons"].array_value.values]
               in (["stop"], ["length"]) for a in ok)
    assert all(a["gen_ai.request.max_tokens"].int_value == 1200 for a in attrs)  # the demo's
    assert all(a["server.address"].string_value == "127.0.0.1" and
               a["server.port"].int_value > 0 for a in attrs)
    assert all(s.end_time_unix_nano >= s.start_time_unix_nano > 0 for s in spans)


@pytest.mark.slow
def test_no_telemetry_configured_loads_no_tracing(env):
    code = ("import sys; from swarm_tui.cli import main; rc = main(['run', '--demo', '5', "
            "'--headless', '--quiet', '--sim-profile', 'fixed:30']); print(sorted(m for m in "
            "sys.modules if m.startswith('opentelemetry.sdk'))); sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**__import__("os").environ, **env}, timeout=60)
    assert r.returncode in (0, 3), r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_latency_buckets_reach_past_the_call_timeout():
    """A dashboard's quantile can show any latency up to the timeout (the buckets stopped
    at 2 s: a p95 above it could not be shown, below it read 4-20 % high)."""
    from swarm_tui.ops.metrics import BUCKETS_S
    from swarm_tui.settings.sections import GatewayConfig

    timeout = GatewayConfig(base_url="http://x").timeout_s
    assert max(BUCKETS_S) > 3 * timeout
    from itertools import pairwise

    widths = [b / a for a, b in pairwise(BUCKETS_S) if a >= 0.01]
    assert max(widths) <= 1.21, max(widths)  # x1.2, rounded to 0.1 ms


def test_the_grafana_dashboard_queries_only_what_the_exporter_exports():
    """Every query of the shipped dashboard parses as PromQL (a real parser), and names
    only series and labels a run's /metrics carries (the exporter's own registry)."""
    from pathlib import Path

    import promql_parser
    from prometheus_client import generate_latest

    from swarm_tui.ops.metrics import RunMetrics

    m = RunMetrics("r1", simulated=True)
    series: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(
            fam.type, ("",))
        labels = set(next((c._labelnames for c in vars(m).values()
                           if getattr(c, "_name", None) == fam.name), ()))
        for suffix in suffixes:
            series[fam.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    dash = json.loads((Path(__file__).resolve().parent.parent.parent / "docs" / "grafana"
                       / "swarm-tui-run.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 15 and all(p["datasource"]["uid"] == "${datasource}"
                                    for p in dash["panels"])
    for expr in exprs:
        promql_parser.parse(expr.replace("$__rate_interval", "5m").replace("$instance", ".*"))
        names = set(re.findall(r"\bswarm_tui_\w+", expr))
        assert names and names <= set(series), (expr, names - set(series))
        used = {label for group in re.findall(r"by \(([^)]*)\)", expr)
                for label in re.split(r"\s*,\s*", group.strip())}
        used |= set(re.findall(r"[{,]\s*(\w+)\s*(?:=~|!=|=)", expr))
        allowed = set().union(*(series[n] for n in names)) | {"instance"}
        assert used <= allowed, (expr, used - allowed)
