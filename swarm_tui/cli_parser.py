"""The command line's grammar: every sub-command, its options and their help. Global
options (`--config`, `--db`, `--readonly`, `--theme`, `-r`) work before or after the
sub-command: on a sub-parser their default is SUPPRESS, so one given before the
sub-command is never overwritten."""

from __future__ import annotations

import argparse
from pathlib import Path

from swarm_tui import __version__
from swarm_tui.canary.state import ACTIONS as CANARY_ACTIONS

CANARY_VERBS = ("status", "history", *CANARY_ACTIONS)

# the console demo: 2,000 tasks for 100 agents paced over ~25 s, so a retry, a fallback and
# a key cooling down happen in front of you; headless, the team's 100-task demo
DEMO_CONSOLE_TASKS = 2000
DEMO_CONSOLE_S = 25.0
DEMO_HEADLESS_TASKS = 100


STORED_RUN = "a stored run (see `swarm-tui runs`), or `last` for the newest"


def _common(p: argparse.ArgumentParser, top: bool = False) -> None:
    # On a sub-command the default is SUPPRESS: an option given before the sub-command
    # (`swarm-tui --db X runs`) must not be overwritten by the sub-parser's default.
    default = None if top else argparse.SUPPRESS
    p.add_argument("--config", metavar="PATH", default=default,
                   help="config file (env SWARM_TUI_CONFIG)")
    p.add_argument("--db", metavar="PATH|URL", default=default,
                   help="SQLite file or postgresql:// URL (env SWARM_TUI_DB; a password "
                   "goes in PGPASSWORD, ~/.pgpass or a service file, never here)")


def _sim_flags(p: argparse.ArgumentParser, prefix: str = "") -> None:
    p.add_argument(f"--{prefix}profile", default="gateway",
                   help="latency profile: gateway, direct, fixed:<ms> (default gateway)")
    p.add_argument(f"--{prefix}rate-429", type=float, help="fraction answered 429 + Retry-After")
    p.add_argument(f"--{prefix}rate-503", type=float, help="fraction answered 503")
    p.add_argument(f"--{prefix}rate-cut", type=float, default=0.0, help="fraction of streams cut")
    p.add_argument(f"--{prefix}rate-hang", type=float, default=0.0,
                   help="fraction that never answer (past the client timeout)")
    p.add_argument(f"--{prefix}rpm-per-key", type=int,
                   help="per-key quota: requests per minute (a refilling bucket; 429 + "
                   "Retry-After + x-ratelimit-* headers)")
    p.add_argument(f"--{prefix}quota-burst", type=int,
                   help="the quota bucket's size (default: the rpm)")
    p.add_argument(f"--{prefix}model-429", action="append", default=[], metavar="MODEL=RATE",
                   help="429s without Retry-After for one model (repeatable)")
    p.add_argument(f"--{prefix}seed", type=int, help="random seed for reproducible runs")


def _console_flags(p: argparse.ArgumentParser, top: bool = False) -> None:
    default = None if top else argparse.SUPPRESS
    p.add_argument("--theme", default=default, help="console theme (swarm-dark, swarm-light, "
                   "swarm-high-contrast, swarm-ansi, swarm-production, or your own)")
    p.add_argument("-r", "--refresh", type=float, metavar="SECONDS", default=default,
                   help="console refresh interval (default 0.25)")
    p.add_argument("--readonly", action="store_true",
                   default=False if top else argparse.SUPPRESS,
                   help="no action that changes a run (pause, cancel, concurrency, keys, "
                   "canary)")


def _execution_flags(p: argparse.ArgumentParser) -> None:
    """What `run` and `resume` share: output, preflight, key-file strictness."""
    p.add_argument("--headless", action="store_true", help="no console: progress + summary")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--no-preflight", action="store_true",
                   help="skip the GET /models check of the gateway and keys")
    p.add_argument("--insecure-key-file", action="store_true",
                   help="accept a key file readable by group/others (warns)")
    _metrics_flags(p, "the run while it executes")


def _metrics_flags(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--metrics-port", type=_port, metavar="PORT",
                   help=f"serve Prometheus metrics of {what} on http://BIND:PORT/metrics "
                   "(0: any free port)")
    p.add_argument("--metrics-bind", metavar="ADDR",
                   help="address the metrics endpoint listens on (default 127.0.0.1; "
                   "0.0.0.0 for a Prometheus on another host)")
    p.add_argument("--metrics-linger", type=float, metavar="SECONDS",
                   help="after the run, keep /metrics up until one scrape has read the final "
                   "figures, at most SECONDS (a short run ends between two scrapes)")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {port}")
    return port


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm-tui", description="Terminal operations console for LLM agent swarms. "
        "Without a sub-command: the console (built-in simulator when nothing is configured).")
    parser.add_argument("--version", action="version", version=f"swarm-tui {__version__}")
    _common(parser, top=True)
    _console_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="run a workload (or --demo N) against a gateway")
    _common(run)
    run.add_argument("workload", nargs="?", help="JSON Lines file, one task per line")
    run.add_argument("--demo", type=int, nargs="?", const=0, metavar="N",
                     help="N demo tasks of the team's shape on the simulator (default: "
                     f"{DEMO_CONSOLE_TASKS:,} paced over ~{DEMO_CONSOLE_S:.0f} s with scripted "
                     f"incidents in the console, {DEMO_HEADLESS_TASKS} at once headless)")
    run.add_argument("--rate", type=float, metavar="CALLS_PER_S",
                     help="open-loop pace: start at most this many calls per second "
                     "(default: unpaced; 0 unpaces the console demo)")
    run.add_argument("--gateway", metavar="NAME", help="configured gateway, or 'sim'")
    run.add_argument("--concurrency", type=int, metavar="N", help="calls in flight (default 100)")
    run.add_argument("--model", help="model for tasks that do not name one")
    run.add_argument("--name", help="a name for the run")
    _execution_flags(run)
    run.add_argument("--no-stream", action="store_true", help="non-streaming calls")
    run.add_argument("--skip-bad-lines", action="store_true",
                     help="run the valid lines of a workload that has bad ones")
    run.add_argument("--transport", choices=["wire", "aiohttp", "httpx2"], default="wire",
                     help="wire (default): the chat-completions protocol straight on aiohttp, "
                     "the least CPU per call; aiohttp / httpx2: through the openai SDK on "
                     "that transport (the reference path)")
    run.add_argument("--seed", type=int, help="seed for retry jitter")
    run.add_argument("--canary-demo", action="store_true",
                     help="simulated canary: baseline on the 'direct' profile, candidate on "
                     "--sim-profile, auto mode with 30 s bakes (key g in the console)")
    run.add_argument("--budget", type=float, metavar="USD",
                     help="per-run cost cap: warn at 80 %%, stop dispatch at the cap (exit 4)")
    run.add_argument("--workers", type=int, metavar="N",
                     help="split the run into batches leased by N worker processes on this "
                     "host (more join with `swarm-tui worker` from any host on the same "
                     "PostgreSQL); needs a gateway every worker reaches")
    run.add_argument("--sim-incidents", action=argparse.BooleanOptionalAction, default=None,
                     help="the demo's scripted trouble on the simulator: kimi-k2.5 streams "
                     "break (retries, fallbacks), 429s cool a key down (on in the console demo)")
    _sim_flags(run, "sim-")
    _console_flags(run)

    watch = sub.add_parser("watch", help="attach the console to a run another process executes")
    _common(watch)
    watch.add_argument("run_id", nargs="?",
                       help="default: the newest running run; `last`: the newest run")
    watch.add_argument("--write", action="store_true",
                       help="allow pause / resume / cancel / concurrency through the store")
    watch.add_argument("--headless", action="store_true",
                       help="no console: follow the run to its end serving --metrics-port")
    _metrics_flags(watch, "the watched run, counted from its stored rows")
    _console_flags(watch)

    serve = sub.add_parser("serve", help="the console in a browser (textual-serve): watch a "
                           "run from a laptop through an SSH tunnel")
    _common(serve)
    serve.add_argument("run_id", nargs="?", help="default: the newest running run")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: reach it through "
                       "`ssh -L 8000:localhost:8000 HOST`; another address needs TLS)")
    serve.add_argument("--port", type=_port, default=8000,
                       help="port (default 8000; with --socket, the tunnel's local port)")
    serve.add_argument("--socket", metavar="PATH",
                       help="listen on a Unix socket only you may connect to (mode 0600) "
                       "instead of a port: `ssh -L 8000:PATH HOST`")
    serve.add_argument("--token-file", metavar="PATH",
                       help="the login token from a file only you can read (default: a new "
                       "one each start, printed once as a URL)")
    serve.add_argument("--certfile", metavar="PEM", help="TLS certificate (with --keyfile)")
    serve.add_argument("--keyfile", metavar="PEM", help="TLS private key")
    serve.add_argument("--public-url", metavar="URL",
                       help="the address the browser uses (default http://HOST:PORT)")
    serve.add_argument("--write", action="store_true",
                       help="allow pause / resume / cancel / concurrency from the browser")
    _console_flags(serve)

    resume = sub.add_parser("resume", help="finish an interrupted run: re-send only tasks "
                            "without a stored result, under the same run id (on a terminal "
                            "in the console, as run; otherwise headless)")
    _common(resume)
    _console_flags(resume)
    resume.add_argument("run_id", help="the interrupted run (see `swarm-tui runs`), or `last`")
    resume.add_argument("--concurrency", type=int, metavar="N",
                        help="calls in flight (default: the run's own)")
    _execution_flags(resume)
    resume.add_argument("--budget", type=float, metavar="USD",
                        help="cost cap for the whole run (what it already cost counts)")

    replay = sub.add_parser("replay", help="a stored run as it was at one moment: the "
                            "console, or with --screenshot an SVG and a status block")
    _common(replay)
    _console_flags(replay)
    replay.add_argument("run_id", help="a stored run (see `swarm-tui runs`), or `last`")
    replay.add_argument("--at", metavar="TIME", default="end",
                        help="14:03:20 / 2026-12-05T14:03:20Z, +2m30s, start, end (default), "
                        "first-failure, alert:KIND (e.g. alert:sla_breach), canary:ACTION")
    replay.add_argument("--screenshot", metavar="FILE.svg",
                        help="write the console at that moment to FILE.svg and print a "
                        "plain-text status block; headless, no terminal needed")
    replay.add_argument("--size", default="120x40", metavar="COLSxROWS",
                        help="the screenshot's terminal size (default 120x40)")

    worker = sub.add_parser("worker", help="join a run started with --workers: lease its "
                            "batches and execute them, until every batch is done")
    _common(worker)
    worker.add_argument("run_id", nargs="?",
                        help="default: the newest running run split into batches")
    worker.add_argument("--concurrency", type=int, metavar="N",
                        help="this worker's calls in flight (default: its share of the "
                        "run's, among the workers alive)")
    worker.add_argument("--transport", choices=["wire", "aiohttp", "httpx2"],
                        default="wire", help="as run's --transport")
    _execution_flags(worker)

    completion = sub.add_parser(
        "completion", help="print the shell completion script: "
        "eval \"$(swarm-tui completion bash)\" (zsh: the same; fish: "
        "swarm-tui completion fish | source)")
    completion.add_argument("shell", choices=["bash", "zsh", "fish"],
                            help="the shell to print the completion script for")

    db = sub.add_parser("db", help="the database: create it (and PostgreSQL roles), copy runs "
                        "between databases")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    init = db_sub.add_parser("init", help="create or migrate the schema of --db")
    _common(init)
    init.add_argument("--roles", action="store_true",
                      help="PostgreSQL: create the reader / operator / executor roles and "
                      "their grants")
    copy = db_sub.add_parser("copy", help="copy stored runs from SRC into DST (SQLite file or "
                             "postgresql:// URL each); runs already in DST are skipped")
    _common(copy)
    copy.add_argument("src", help="the database the runs are read from")
    copy.add_argument("dst", help="the database they go to (created if it is a new file)")
    copy.add_argument("--run", action="append", metavar="RUN_ID",
                      help="only this run (repeatable; default: every run not executing)")

    runs = sub.add_parser("runs", help="stored runs, newest first")
    _common(runs)
    runs.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    runs.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")

    report = sub.add_parser("report", help="a stored run's summary, or two runs compared")
    _common(report)
    report.add_argument("run_id", help=STORED_RUN)
    report.add_argument("--compare", metavar="RUN_B", help="before/after table: RUN_ID vs RUN_B")
    report.add_argument("--json", action="store_true",
                        help="the summary object `run --json` prints")

    cost = sub.add_parser("cost", help="a run's cost: totals, breakdowns, projections, "
                          "what-if per model and for the routing")
    _common(cost)
    cost.add_argument("run_id", help=STORED_RUN)
    cost.add_argument("--json", action="store_true", help="the breakdown as JSON")

    export = sub.add_parser("export", help="a run's tasks and attempts as CSV or JSON Lines")
    _common(export)
    export.add_argument("run_id", help=STORED_RUN)
    export.add_argument("--format", choices=["csv", "jsonl"], default="jsonl",
                        help="csv: one row per attempt; jsonl (default): one task per line")
    export.add_argument("--out", metavar="FILE", help="default: standard output")

    _canary_parser(sub)
    _keys_parser(sub)

    sim = sub.add_parser("sim", help="serve the simulator gateway for any OpenAI client")
    _common(sim)
    sim.add_argument("--host", default="127.0.0.1",
                     help="address to listen on (default 127.0.0.1: this machine only)")
    sim.add_argument("--port", type=int, default=8787, help="port (default 8787)")
    _sim_flags(sim)
    sim.add_argument("--keys-file", type=Path,
                     help="accept only these keys (one per line); default any Bearer key")
    sim.add_argument("--usage", choices=["final", "inline", "none"], default="final",
                     help="how streamed usage is reported")
    sim.add_argument("--prompt-counting", choices=["estimate", "chars4", "bytes"],
                     default="estimate",
                     help="prompt tokens billed: as an o200k-like tokenizer would (estimate), "
                     "~4 characters a token, or every UTF-8 byte (the most a byte-level BPE "
                     "can bill)")
    sim.add_argument("--chunks", type=int, default=6, help="content chunks per streamed answer")
    sim.add_argument("--cached-fraction", type=float, default=0.0,
                     help="share of prompt tokens reported as cached")
    sim.add_argument("--usage-style", choices=["openai", "deepseek"], default="openai",
                     help="cache hits as prompt_tokens_details.cached_tokens (openai) or "
                     "prompt_cache_hit/miss_tokens (deepseek)")
    sim.add_argument("--rate-stream-error", type=float, default=0.0,
                     help="fraction of streams that end in an in-stream error event")
    sim.add_argument("--stream-error-code", type=int, default=503,
                     help="the code the in-stream error carries")
    sim.add_argument("--rate-malformed", type=float, default=0.0,
                     help="fraction of answers with a malformed chunk / truncated JSON body")
    sim.add_argument("--ignore-stream", action="store_true",
                     help="answer one JSON completion even when asked to stream")
    sim.add_argument("--stdin-control", action="store_true", help=argparse.SUPPRESS)
    return parser


def _canary_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("canary", help="the gateway canary: status, promote, abort, history")
    _common(p)
    p.add_argument("verb", choices=CANARY_VERBS,
                   metavar="{" + ",".join(CANARY_VERBS) + "}",
                   help="status / history read; the rest move the canary (audited)")
    p.add_argument("pct", nargs="?", help="for `set`: the candidate's share of users, 1-100")
    p.add_argument("--reason", help="why (kept in the audit log)")
    p.add_argument("--json", action="store_true", help="status / history as JSON")
    p.add_argument("--limit", type=int, default=20, help="history entries (default 20)")
    p.add_argument("--readonly", action="store_true", default=argparse.SUPPRESS,
                   help="refuse any action that changes it (also before the sub-command)")


def _keys_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keys", help="API keys: list, add (stdin/env), retire, enable")
    _common(p)
    p.add_argument("verb", choices=("list", "add", "retire", "enable"),
                   help="list keys; add one (from stdin or --from-env); retire / enable one "
                   "by fingerprint")
    p.add_argument("fingerprint", nargs="?", help="for retire / enable: the key's fingerprint "
                   "(a unique part is enough), as `keys list` shows it")
    p.add_argument("--gateway", help="the gateway (default: the only or default one)")
    p.add_argument("--label", help="for add: a label kept next to the key in the key file")
    p.add_argument("--from-env", metavar="VAR", help="for add: read the key from $VAR "
                   "instead of standard input")
    p.add_argument("--json", action="store_true", help="list as JSON")
    p.add_argument("--insecure-key-file", action="store_true",
                   help="accept a key file readable by group/others (warns)")
