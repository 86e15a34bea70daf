"""A stored run with a fixed clock (issue 35's snapshot moments): 60 tasks over 30 s on two
gateways behind a canary, a 429 storm (8–10.3 s) that cools one key from 10.3 s to 16 s, and a
canary that is promoted to 25 % at 6 s and aborted at 20 s after its candidate's 503s.

Rows are written as the writer writes them (the same tables and columns), at fixed
times, so pictures of the console at a moment are the same on every machine."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from swarm_tui.store.schema import MIGRATIONS, SCHEMA_VERSION

T0 = 1_796_400_000.0  # the run's start (unix seconds)
RUN_ID = "20261205-140000-f1x0"
END_S = 30.5
KEY_A, KEY_B, KEY_C = "sk-…aaaa#a1a1a1", "sk-…bbbb#b2b2b2", "sk-…cccc#c3c3c3"
CANARY = {"baseline": "gw-a", "candidate": "gw-b", "stages": [5, 25, 50, 100],
          "bake": 3600.0, "min_samples": 5}
STORM = (8.0, 10.3)        # sends on key A in here are answered 429 (three)
COOLING = (10.3, 16.0)     # key A cooling
PROMOTE_S, ABORT_S = 6.0, 20.0
FAILING = (15.0, 20.0)     # candidate calls answered 503 in here
MOMENTS = {"before": 7.5, "during": 12.0, "after": 25.0}  # seconds from the start


def _task_json(i: int) -> str:
    return json.dumps({"id": f"doc-{i:03d}", "prompt": f"요약해 주세요: 문서 {i}"},
                      ensure_ascii=False)


def build(path: Path) -> str:
    """Writes the run into a new database at `path`; returns its id."""
    db = sqlite3.connect(path)
    for script in MIGRATIONS:
        db.executescript(script)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    config = {"gateways": ["gw-a", "gw-b"], "concurrency": 6,
              "settings": {"tasks_per_day": 12000, "canary": CANARY}}
    db.execute("INSERT INTO runs (id, name, status, simulated, started_at, finished_at, "
               "heartbeat_at, wall_ms, total, workload_hash, config_json, summary_json) "
               "VALUES (?, 'incident-fixture', 'finished', 1, ?, ?, ?, ?, 60, 'h', ?, NULL)",
               (RUN_ID, T0, T0 + END_S, T0 + END_S, END_S * 1000, json.dumps(config)))
    uid = 0
    for i in range(60):
        sent = 0.5 * i + 0.2
        candidate = i % 5 == 4 and sent < ABORT_S
        gw, bucket = ("gw-b", "candidate") if candidate else ("gw-a", "baseline")
        model = "deepseek-v3.2"
        db.execute("INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (RUN_ID, i, f"doc-{i:03d}", _task_json(i), model, gw, bucket))
        on_a = i % 2 == 0 and not COOLING[0] <= sent < COOLING[1]  # (B while A cools)
        key = KEY_C if candidate else (KEY_A if on_a else KEY_B)
        calls: list[tuple] = []  # (sent_s, key, latency_ms, status, error_class, wait_s)
        if not candidate and key == KEY_A and STORM[0] <= sent < STORM[1]:
            calls += [(sent, KEY_A, 40.0, 429, "rate_limited", 1.0), (sent + 1.04, KEY_B, 300.0,
                                                                      None, None, None)]
        elif candidate and FAILING[0] <= sent < FAILING[1]:
            calls += [(sent, KEY_C, 100.0, 503, "server", 0.5),
                      (sent + 0.6, KEY_C, 100.0, 503, "server", None)]
        else:
            calls.append((sent, key, 300.0 + (i % 7) * 10, None, None, None))
        for n, (at, k, latency, status, error, wait) in enumerate(calls, 1):
            uid += 1
            ok = error is None
            db.execute(
                "INSERT INTO attempts (uid, run_id, seq, number, model, gateway, key_fp, "
                "sent_at, queue_ms, latency_ms, ttft_ms, status_code, error_class, "
                "error_message, retry_wait_s, tokens_in, tokens_out, cached_in, outcome) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
                (f"fixture-{uid}", RUN_ID, i, n, model, gw, k, T0 + at, latency,
                 latency / 3 if ok else None, status, error,
                 None if ok else f"HTTP {status}", wait, 120 if ok else 0,
                 80 if ok else 0, "ok" if ok else "error"))
        at, k, latency, status, error, _wait = calls[-1]
        ok = error is None
        db.execute(
            "INSERT INTO results (run_id, seq, state, model, gateway, bucket, key_fp, "
            "attempts, tokens_in, tokens_out, cached_in, usage_estimated, cost_usd, "
            "latency_ms, ttft_ms, queue_ms, status_code, error_class, error_message, "
            "response_text, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?, "
            "?, ?, ?, ?, ?, ?)",
            (RUN_ID, i, "succeeded" if ok else "failed", model, gw, bucket, k, len(calls),
             120 if ok else 0, 80 if ok else 0, 0.0004 if ok else 0.0, latency if ok else None,
             latency / 3 if ok else None, (at - sent) * 1000, status, error,
             None if ok else f"HTTP {status}", "요약" if ok else None,
             T0 + at + latency / 1000))
    for at, gw, fp, state, until, reason in (
            (0.1, "gw-a", KEY_A, "active", None, None), (0.1, "gw-a", KEY_B, "active", None, None),
            (0.1, "gw-b", KEY_C, "active", None, None),
            (COOLING[0], "gw-a", KEY_A, "cooling", T0 + COOLING[1], "429 storm: 3 in 2 s"),
            (COOLING[1] + 0.1, "gw-a", KEY_A, "active", None, None)):
        db.execute("INSERT INTO key_changes VALUES (?, ?, ?, ?, '', ?, 'config', ?, ?, ?)",
                   (RUN_ID, T0 + at, gw, fp, fp[-6:], state, until, reason))
    for gw, fp in (("gw-a", KEY_A), ("gw-a", KEY_B), ("gw-b", KEY_C)):  # as they ended
        db.execute("INSERT INTO key_state (run_id, gateway, fingerprint, worker, label, "
                   "source, state, cooling_until, reason, in_flight, calls, rate_limited, "
                   "errors, tokens_in, tokens_out, last_used, updated_at) VALUES "
                   "(?, ?, ?, '', ?, 'config', 'active', NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, ?)",
                   (RUN_ID, gw, fp, fp[-6:], T0 + END_S))
    name = "gw-a->gw-b"
    for at, action, fp_, tp, fs, ts, reason in (
            (0.05, "start", None, 5, None, "progressing", "first seen: stages [5, 25, 50, 100]"),
            (PROMOTE_S, "promote", 5, 25, "progressing", "progressing", "looks healthy"),
            (ABORT_S, "abort", 25, 0, "progressing", "aborted", "candidate 503s")):
        db.execute("INSERT INTO canary_actions (name, at, action, actor, source, from_pct, "
                   "to_pct, from_status, to_status, reason) VALUES (?, ?, ?, 'oncall', "
                   "'console', ?, ?, ?, ?, ?)", (name, T0 + at, action, fp_, tp, fs, ts, reason))
    db.execute("INSERT INTO canary VALUES (?, 'gw-a', 'gw-b', 'aborted', 0, ?, ?, NULL, 0, 3, ?)",
               (name, T0 + ABORT_S, T0 + ABORT_S, T0 + ABORT_S))
    for at, kind, detail in ((0.0, "session_started", None),
                             (PROMOTE_S, "control", "canary promote: 5% → 25% (by oncall)"),
                             (COOLING[0], "control",
                              f"429 storm: key {KEY_A} cooling until +16.0s"),
                             (ABORT_S, "control", "canary 25% → 0% (aborted): candidate 503s")):
        db.execute("INSERT INTO events (run_id, at, kind, actor, detail_json) VALUES "
                   "(?, ?, ?, NULL, ?)", (RUN_ID, T0 + at, kind, detail))
    db.commit()
    db.close()
    return RUN_ID
