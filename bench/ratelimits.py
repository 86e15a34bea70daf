"""Rate limits the way gateways send them, measured side by side in one run.

Every swarm is the real CLI (`swarm-tui run … --json`) against a server in its own
process: our simulator, or llmock (a third-party mock with per-key refilling quotas).

1. demo: `--demo N` on one key with the simulator's injected 429s vs the same run with
   429s off — wall ratio (target ≤ 1.10).
2. quotas: 3 keys with per-key request quotas (429 + Retry-After + x-ratelimit-*), every
   key strategy — failed tasks (target 0), 429s per call (≤ 5 %), wall / quota-bound ideal
   (≤ 1.15; ideal = (tasks − the keys' bursts) ÷ their refill rate).
3. llmock: the same on a server we did not write.
4. one model 429s (no Retry-After) on a one-key gateway: the other model's queue p95.
5. llmock's tokens-per-minute quota alone (its 429s say requests remain): 429s per call.
6. two-models: the team's routing (long prompts to kimi, short to deepseek, same keys) on
   llmock's per-key tokens quota, for each `quota_scope`: 429s per call.
7. two-clients: two swarms on the same keys at once, neither told of the other: 429s per
   call and each one's wall against the quota-bound ideal for both.

    python bench/ratelimits.py [--demo 5000] [--tasks 1000] [--skip-llmock]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import free_port, sim_process

KEYS = ",".join(f"sk-bench-{c * 24}" for c in "abc")


def swarm(*args: str, env: dict[str, str] | None = None) -> dict:
    r = subprocess.run([sys.executable, "-m", "swarm_tui", *args, "--json", "--quiet"],
                       capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL,
                       env={**os.environ, **(env or {})})
    if r.returncode not in (0, 3):
        raise RuntimeError(f"swarm-tui {' '.join(args)}: exit {r.returncode}: {r.stderr[-500:]}")
    return json.loads(r.stdout)


def stats(url: str) -> dict:
    return httpx2.get(url.replace("/v1", "/sim/stats"), timeout=5).json()


def config(tmp: Path, url: str, strategy: str = "least-in-flight", extra: str = "") -> Path:
    cfg = tmp / f"{strategy}.toml"
    cfg.write_text(f'[gateways.q]\nbase_url = "{url}"\nkey_env = ["GW_KEYS"]\n'
                   f'key_strategy = "{strategy}"\nmax_concurrency = 200\n{extra}')
    return cfg


def workload(tmp: Path, n: int, models: tuple[str, ...] = ("deepseek-v3.2",)) -> Path:
    w = tmp / f"w{n}-{len(models)}.jsonl"
    w.write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"task {i}", "max_tokens": 16,
                                     "model": models[i % len(models)]}) + "\n"
                         for i in range(n)))
    return w


def demo(n: int, tmp: Path) -> None:
    print(f"\n1. --demo {n} on the simulator's one key, 100 in flight")
    walls = {}
    for profile in ("gateway", "direct"):
        for label, flags in (("429s off", ["--sim-rate-429", "0"]), ("default 429s", [])):
            s = swarm("run", "--demo", str(n), "--headless", "--sim-profile", profile,
                      "--db", str(tmp / "demo.db"), *flags)
            walls[(profile, label)] = s["wall_ms"]
            print(f"   {profile:8} {label:13} wall {s['wall_ms'] / 1000:6.1f} s  "
                  f"{s['succeeded']}/{s['total']} ok")
        ratio = walls[(profile, "default 429s")] / walls[(profile, "429s off")]
        print(f"   {profile:8} ratio with/without 429s: {ratio:.2f}  (target ≤ 1.10)")


def quota_row(label: str, s: dict, calls: int, r429: int, ideal_s: float) -> None:
    print(f"   {label:18} failed {s['failed']:3}  429s {r429:4} of {calls:5} calls "
          f"({r429 / max(1, calls):5.1%})  wall {s['wall_ms'] / 1000:6.1f} s  "
          f"wall/ideal {s['wall_ms'] / 1000 / ideal_s:4.2f}")


def quotas(n: int, tmp: Path, rpm: int, burst: int) -> None:
    rate = 3 * rpm / 60
    ideal = max(0.0, n - 3 * burst) / rate
    print(f"\n2. {n} tasks, 3 keys x {rpm}/min (bucket {burst}) on the simulator: "
          f"ideal {ideal:.1f} s")
    for strategy in ("least-in-flight", "round-robin", "proactive"):
        with sim_process("--profile", "fixed:50", "--rpm-per-key", str(rpm),
                         "--quota-burst", str(burst)) as url:
            s = swarm("run", str(workload(tmp, n)), "--headless", "--config",
                      str(config(tmp, url, strategy)), "--concurrency", "100",
                      "--db", str(tmp / "q.db"), env={"GW_KEYS": KEYS})
            st = stats(url)
            quota_row(strategy, s, st.get("requests", 0), st.get("429", 0), ideal)


@contextlib.contextmanager
def llmock(*flags: str) -> Iterator[str]:
    port = free_port()
    exe = Path(sys.executable).with_name("llmock")
    proc = subprocess.Popen([str(exe), "serve", "--port", str(port), "--host", "127.0.0.1",
                             "--log-level", "warning", "--tool-mode", "off", *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(100):
            with contextlib.suppress(httpx2.HTTPError):
                httpx2.get(url + "/models", headers={"authorization": "Bearer sk-p"}, timeout=1)
                break
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def llmock_swarm(tmp: Path, url: str, strategy: str, w: Path, tag: str
                 ) -> tuple[dict, int, int]:
    """The workload on llmock's 3 keys, 100 in flight: (summary, calls, 429s), the calls
    counted from the run's export (llmock keeps no count of its own)."""
    db = str(tmp / f"{tag}-{strategy}.db")
    s = swarm("run", str(w), "--headless", "--config", str(config(tmp, url, strategy)),
              "--concurrency", "100", "--db", db, env={"GW_KEYS": KEYS})
    rows = subprocess.run([sys.executable, "-m", "swarm_tui", "export", s["run_id"], "--db",
                           db], capture_output=True, text=True).stdout
    attempts = [a for line in rows.splitlines() for a in json.loads(line)["attempts"]]
    return s, len(attempts), sum(1 for a in attempts if a["status_code"] == 429)


def third_party(n: int, tmp: Path, rpm: int) -> None:
    rate = 3 * rpm / 60
    ideal = max(0.0, n - 3 * rpm) / rate + 0.05
    print(f"\n3. {n} tasks, 3 keys x {rpm}/min on llmock (bucket = rpm): ideal {ideal:.1f} s")
    for strategy in ("least-in-flight", "round-robin", "proactive"):
        with llmock("--rpm", str(rpm), "--latency-ms", "50") as url:
            s, calls, r429 = llmock_swarm(tmp, url, strategy, workload(tmp, n), "l")
            quota_row(strategy, s, calls, r429, ideal)


PROSE = ("The on-call engineer reads the swarm's latency, its errors and what it cost, "
         "then decides whether the canary moves on. ") * 14  # ~1,600 characters


def third_party_tokens(tmp: Path, n: int, tpm: int) -> None:
    """llmock's tokens-per-minute quota alone: its 429s say nothing of requests and name
    the tokens' reset — a client reading only x-ratelimit-*-requests sees an open key and
    keeps sending. llmock charges a call its body's bytes / 4 plus its max_tokens."""
    w = tmp / f"long{n}.jsonl"
    w.write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"{i}: {PROSE}",
                                     "max_tokens": 200, "model": "deepseek-v3.2"}) + "\n"
                         for i in range(n)))
    charge = (len(PROSE) + 150) // 4 + 200  # llmock's count, body framing included
    ideal = max(0.0, n * charge - 3 * tpm) / (3 * tpm / 60)
    print(f"\n5. {n} tasks (~{charge} tokens a call), 3 keys x {tpm:,} tokens/min on llmock "
          f"(no request quota): ideal {ideal:.1f} s")
    for strategy in ("least-in-flight", "round-robin", "proactive"):
        with llmock("--tpm", str(tpm), "--latency-ms", "50") as url:
            s, calls, r429 = llmock_swarm(tmp, url, strategy, w, "t")
            quota_row(strategy, s, calls, r429, ideal)


def two_models_one_quota(tmp: Path, n: int, tpm: int,
                         scopes: tuple[str, ...] = ("model", "auto", "key")) -> None:
    """The team's routing over one key-wide quota (llmock's tpm is per key, as a LiteLLM
    virtual key's tpm_limit): one prompt in four is long and goes to kimi-k2.5, the rest
    to deepseek-v3.2, the same keys for both. `quota_scope = "model"` is the pool before
    2026-12-06 (a bucket per key and model: each spent the key's whole quota); `auto`
    learns the scope from the answers' counts; `key` is told."""
    w = tmp / f"mixed{n}.jsonl"
    w.write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"{i}: " + PROSE * (
        4 if i % 4 == 0 else 1), "max_tokens": 200}) + "\n" for i in range(n)))
    short, long = ((len(PROSE) * k + 150) // 4 + 200 for k in (1, 4))
    ideal = max(0.0, n * (0.75 * short + 0.25 * long) - 3 * tpm) / (3 * tpm / 60)
    print(f"\n6. {n} tasks, 1 in 4 long (~{long} tokens, kimi-k2.5) and 3 short (~{short}, "
          f"deepseek-v3.2), 3 keys x {tpm:,} tokens/min for both models on llmock: "
          f"ideal {ideal:.1f} s")
    for scope in scopes:
        with llmock("--tpm", str(tpm), "--latency-ms", "50") as url:
            cfg = config(tmp, url, extra=f'quota_scope = "{scope}"\n')
            db = str(tmp / f"mixed-{scope}.db")
            s = swarm("run", str(w), "--headless", "--config", str(cfg), "--concurrency",
                      "100", "--db", db, env={"GW_KEYS": KEYS})
            rows = subprocess.run([sys.executable, "-m", "swarm_tui", "export", s["run_id"],
                                   "--db", db], capture_output=True, text=True).stdout
            attempts = [a for line in rows.splitlines() for a in json.loads(line)["attempts"]]
            r429 = sum(1 for a in attempts if a["status_code"] == 429)
            quota_row(f"quota_scope={scope}", s, len(attempts), r429, ideal)


def two_clients(tmp: Path, n: int, tpm: int) -> None:
    """Two engineers' swarms on the same keys at once, neither told of the other: each
    learns the quota alone, and the other's spending arrives as refusals in bursts (the
    calls it had in flight). A refusal raises what each call is charged by 25 % — once per
    event since 2026-12-06; before, once per refused call, so a burst of 20 refusals made
    the charge 8x (its cap) and that client used an eighth of its share until answers
    brought it down 1 % at a time."""
    w = tmp / f"two{n}.jsonl"
    w.write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"{i}: {PROSE}",
                                     "max_tokens": 200, "model": "deepseek-v3.2"}) + "\n"
                         for i in range(n)))
    charge = (len(PROSE) + 150) // 4 + 200
    ideal = max(0.0, 2 * n * charge - 3 * tpm) / (3 * tpm / 60)
    print(f"\n7. two clients at once, {n} tasks each (~{charge} tokens a call), 3 keys x "
          f"{tpm:,} tokens/min on llmock: ideal {ideal:.1f} s for both")
    refused: dict[str, list[float]] = {}
    firsts: list[float] = []
    with llmock("--tpm", str(tpm), "--latency-ms", "50") as url:
        cfg = config(tmp, url)
        procs = [subprocess.Popen(
            [sys.executable, "-m", "swarm_tui", "run", str(w), "--headless", "--config",
             str(cfg), "--concurrency", "100", "--db", str(tmp / f"two-{c}.db"), "--json",
             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL, env={**os.environ, "GW_KEYS": KEYS}) for c in "ab"]
        for c, proc in zip("ab", procs, strict=True):
            out, err = proc.communicate(timeout=1800)
            if proc.returncode not in (0, 3):
                raise RuntimeError(f"client {c}: exit {proc.returncode}: {err[-500:]}")
            s = json.loads(out)
            rows = subprocess.run([sys.executable, "-m", "swarm_tui", "export", s["run_id"],
                                   "--db", str(tmp / f"two-{c}.db")], capture_output=True,
                                  text=True).stdout
            attempts = [a for line in rows.splitlines() for a in json.loads(line)["attempts"]]
            r429 = sum(1 for a in attempts if a["status_code"] == 429)
            quota_row(f"client {c}", s, len(attempts), r429, ideal)
            refused[c] = [a["sent_at"] for a in attempts if a["status_code"] == 429]
            firsts.append(min(a["sent_at"] for a in attempts))
    # the full bucket both race for at the start, against the quota's pace after it
    start = min(firsts)
    early = {c: sum(1 for t in ts if t - start < 2.0) for c, ts in refused.items()}
    print(f"   429s sent in the first 2 s: {early['a']} + {early['b']}; after: "
          f"{len(refused['a']) - early['a']} + {len(refused['b']) - early['b']}")


def one_model(tmp: Path) -> None:
    print("\n4. one key; kimi-k2.5 answers 429 (no Retry-After) to everything")
    for label, flags in (("healthy", []), ("kimi all 429", ["--model-429", "kimi-k2.5=1"])):
        with sim_process("--profile", "fixed:50", *flags) as url:
            cfg = config(tmp, url, extra="[retry]\nrate_limit_max_wait_s = 5\n"
                                         "[routing]\nfallback = {}\n")
            s = swarm("run", str(workload(tmp, 200, ("kimi-k2.5", "deepseek-v3.2"))),
                      "--headless", "--config", str(cfg), "--concurrency", "20",
                      "--db", str(tmp / "m.db"), env={"GW_KEYS": KEYS.split(",")[0]})
            d = s["by_model"]["deepseek-v3.2"]
            print(f"   {label:13} deepseek {d['succeeded']}/{d['total']} ok, queue p95 "
                  f"{d['queue_ms']['p95']:,.0f} ms; kimi {s['by_model']['kimi-k2.5']['failed']}"
                  " failed")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--demo", type=int, default=5000)
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--rpm", type=int, default=600)
    ap.add_argument("--burst", type=int, default=20)
    ap.add_argument("--llmock-rpm", type=int, default=300)
    ap.add_argument("--skip-llmock", action="store_true")
    ap.add_argument("--llmock-tpm", type=int, default=96_000)
    ap.add_argument("--only", choices=["demo", "quotas", "llmock", "model", "tokens",
                                       "two-models", "two-clients"])
    ap.add_argument("--mixed-tasks", type=int, default=600)
    ap.add_argument("--scopes", default="model,auto,key", help="the quota_scopes of 6")
    ap.add_argument("--client-tasks", type=int, default=600, help="each client's, in 7")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if a.only in (None, "demo"):
            demo(a.demo, tmp)
        if a.only in (None, "quotas"):
            quotas(a.tasks, tmp, a.rpm, a.burst)
        if a.only in (None, "llmock") and not a.skip_llmock:
            third_party(a.tasks, tmp, a.llmock_rpm)
        if a.only in (None, "model"):
            one_model(tmp)
        if a.only in (None, "tokens") and not a.skip_llmock:
            third_party_tokens(tmp, 600, a.llmock_tpm)
        if a.only in (None, "two-models") and not a.skip_llmock:
            two_models_one_quota(tmp, a.mixed_tasks, a.llmock_tpm, tuple(a.scopes.split(",")))
        if a.only in (None, "two-clients") and not a.skip_llmock:
            two_clients(tmp, a.client_tasks, a.llmock_tpm)


if __name__ == "__main__":
    main()
