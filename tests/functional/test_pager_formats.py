"""Alerts in the formats the pager already speaks, checked against each receiver's
published schema: PagerDuty Events API v2 (trigger, then resolve by the same dedup_key)
and Alertmanager's `POST /api/v2/alerts` (postableAlerts: labels, annotations, startsAt,
endsAt). A real run whose SLA breaches pages, and the breach still open when the run ends
is resolved."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest

from tests.conftest import TEST_KEY, start_sim_process, swarm

PD_ACTIONS = {"trigger", "acknowledge", "resolve"}
PD_SEVERITIES = {"critical", "error", "warning", "info"}
PD_TOP = {"routing_key", "event_action", "dedup_key", "payload", "images", "links", "client",
          "client_url"}
PD_PAYLOAD = {"summary", "source", "severity", "timestamp", "component", "group", "class",
              "custom_details"}
AM_KEYS = {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _rfc3339(value: str) -> datetime:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", value), value
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def validate_pagerduty(event: dict) -> None:
    """developer.pagerduty.com: Events API v2, `POST /v2/enqueue`."""
    assert set(event) <= PD_TOP, set(event) - PD_TOP
    assert isinstance(event["routing_key"], str) and event["routing_key"]
    assert event["event_action"] in PD_ACTIONS
    key = event.get("dedup_key")
    assert key is None or (isinstance(key, str) and 0 < len(key) <= 255)
    if event["event_action"] == "trigger":
        p = event["payload"]
        assert set(p) <= PD_PAYLOAD, set(p) - PD_PAYLOAD
        assert isinstance(p["summary"], str) and 0 < len(p["summary"]) <= 1024
        assert isinstance(p["source"], str) and p["source"]
        assert p["severity"] in PD_SEVERITIES
        if "timestamp" in p:
            _rfc3339(p["timestamp"])
        assert isinstance(p.get("custom_details", {}), dict)
        for link in event.get("links", []):  # each {href, text?}
            assert set(link) <= {"href", "text"} and link["href"].startswith("http"), link
    else:
        assert key, "acknowledge and resolve need the dedup_key of the trigger"


def validate_alertmanager(body: list) -> None:
    """prometheus/alertmanager api/v2/openapi.yaml: postableAlerts."""
    assert isinstance(body, list) and body
    for alert in body:
        assert set(alert) <= AM_KEYS, set(alert) - AM_KEYS
        labels = alert["labels"]
        assert labels and all(LABEL_NAME.match(k) and isinstance(v, str)
                              for k, v in labels.items()), labels
        assert all(isinstance(v, str) for v in alert.get("annotations", {}).values())
        assert alert.get("generatorURL", "http").startswith("http"), alert
        starts = _rfc3339(alert["startsAt"]) if "startsAt" in alert else None
        if "endsAt" in alert:
            assert starts is None or _rfc3339(alert["endsAt"]) >= starts


@pytest.mark.slow
def test_a_breach_pages_and_resolves_in_pagerduty_and_alertmanager(tmp_path, receiver,
                                                                    no_user_config):
    proc, port = start_sim_process("--profile", "fixed:20", "--rate-503", "0.2")
    cfg = tmp_path / "c.toml"
    hook = f"http://127.0.0.1:{receiver.port}"
    cfg.write_text(f'[gateways.local]\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                   'key_env = ["GW_KEY"]\n'
                   '[alerts]\nsla_sustain = "1s"\nsla_window = "5s"\nsla_min_calls = 10\n'
                   'console_url = "https://console.example:8443/"\n'
                   f'[[alerts.webhooks]]\nname = "pd"\nformat = "pagerduty"\n'
                   f'url = "{hook}/pd"\nrouting_key_env = "PD_KEY"\n'
                   'events = ["sla_breach", "run_finished"]\n'
                   f'[[alerts.webhooks]]\nname = "am"\nformat = "alertmanager"\n'
                   f'url = "{hook}/am"\nevents = ["sla_breach", "run_finished"]\n')
    cfg.chmod(0o600)  # it holds the receivers' URLs
    try:
        r = swarm("run", "--demo", "600", "--headless", "--quiet", "--rate", "150",
                  "--config", str(cfg), env={"GW_KEY": TEST_KEY, "PD_KEY": "R" * 32})
    finally:
        proc.terminate()
        proc.wait(10)
    assert r.returncode == 3, r.stderr  # 20 % of calls fail: the SLA is breached
    pd = receiver.json("/pd")
    am = [a for body in receiver.json("/am") for a in body]
    for event in pd:
        validate_pagerduty(event)
    validate_alertmanager(am)
    breach = [e for e in pd if e["dedup_key"].endswith("/sla_breach")]
    assert [e["event_action"] for e in breach] == ["trigger", "resolve"], pd
    assert breach[0]["payload"]["severity"] == "critical"
    assert breach[0]["routing_key"] == "R" * 32
    am_breach = [a for a in am if a["labels"]["alertname"] == "swarm_tui_sla_breach"]
    assert [("endsAt" in a) for a in am_breach] == [False, True]
    assert am_breach[0]["labels"] == am_breach[1]["labels"]  # one alert, then its end
    assert any(e.get("payload", {}).get("class") == "run_finished" for e in pd)
    # the routing key is a credential: stored as its tag only
    events = swarm("report", "last", "--json").stdout
    assert "R" * 32 not in events
    assert json.loads(events)["status"] == "finished"
    # from the pager to the moment: the page carries the command, and pasted it opens
    # the console as it was when the breach was paged (issue 35)
    command = breach[0]["payload"]["custom_details"]["replay"]
    assert command == am_breach[0]["annotations"]["replay"]
    argv = command.split()
    assert argv[:2] == ["swarm-tui", "replay"] and argv[3] == "--at"
    # the time the pager shows is the time to paste (to the ms, as the command has it)
    assert breach[0]["payload"]["timestamp"] == argv[4] == am_breach[0]["startsAt"]
    # and, with alerts.console_url, a link to the same moment in the served console
    link = f"https://console.example:8443/at/{argv[2]}/{argv[4].replace(':', '%3A')}"
    assert breach[0]["links"] == [{"href": link,
                                   "text": "swarm-tui: the console at this moment"}]
    assert am_breach[0]["generatorURL"] == link
    shot = tmp_path / "breach.svg"
    opened = swarm(*argv[1:], "--screenshot", str(shot), "--size", "80x24")
    assert opened.returncode == 0, opened.stderr
    assert shot.read_text().startswith("<svg") and ": running" in opened.stdout
    by_event = swarm("replay", "last", "--at", "alert:sla_breach", "--screenshot",
                     str(tmp_path / "b2.svg"))
    assert by_event.returncode == 0, by_event.stderr
