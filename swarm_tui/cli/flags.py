"""Options more than one command takes, and the figures their help names. Imported to
build the parser, so it imports nothing but argparse."""

from __future__ import annotations

import argparse

# the console demo: 2,000 tasks for 100 agents paced over ~25 s, so a retry, a fallback and
# a key cooling down happen in front of you; headless, the team's 100-task demo
DEMO_CONSOLE_TASKS = 2000
DEMO_CONSOLE_S = 25.0
DEMO_HEADLESS_TASKS = 100


STORED_RUN = "a stored run (see `swarm-tui runs`), or `last` for the newest"


def common_flags(p: argparse.ArgumentParser, top: bool = False) -> None:
    # On a sub-command the default is SUPPRESS: an option given before the sub-command
    # (`swarm-tui --db X runs`) must not be overwritten by the sub-parser's default.
    default = None if top else argparse.SUPPRESS
    p.add_argument("--config", metavar="PATH", default=default,
                   help="config file (env SWARM_TUI_CONFIG)")
    p.add_argument("--db", metavar="PATH|URL", default=default,
                   help="SQLite file or postgresql:// URL (env SWARM_TUI_DB; a password "
                   "goes in PGPASSWORD, ~/.pgpass or a service file, never here)")


def sim_flags(p: argparse.ArgumentParser, prefix: str = "") -> None:
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


def console_flags(p: argparse.ArgumentParser, top: bool = False) -> None:
    default = None if top else argparse.SUPPRESS
    p.add_argument("--theme", default=default, help="console theme (swarm-dark, swarm-light, "
                   "swarm-high-contrast, swarm-ansi, swarm-production, or your own)")
    p.add_argument("-r", "--refresh", type=float, metavar="SECONDS", default=default,
                   help="console refresh interval (default 0.25)")
    p.add_argument("--readonly", action="store_true",
                   default=False if top else argparse.SUPPRESS,
                   help="no action that changes a run (pause, cancel, concurrency, keys, "
                   "canary)")


def execution_flags(p: argparse.ArgumentParser) -> None:
    """What `run` and `resume` share: output, preflight, key-file strictness."""
    p.add_argument("--headless", action="store_true", help="no console: progress + summary")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--no-preflight", action="store_true",
                   help="skip the GET /models check of the gateway and keys")
    p.add_argument("--insecure-key-file", action="store_true",
                   help="accept a key file readable by group/others (warns)")
    metrics_flags(p, "the run while it executes")


def metrics_flags(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--metrics-port", type=port_number, metavar="PORT",
                   help=f"serve Prometheus metrics of {what} on http://BIND:PORT/metrics "
                   "(0: any free port)")
    p.add_argument("--metrics-bind", metavar="ADDR",
                   help="address the metrics endpoint listens on (default 127.0.0.1; "
                   "0.0.0.0 for a Prometheus on another host)")
    p.add_argument("--metrics-linger", type=float, metavar="SECONDS",
                   help="after the run, keep /metrics up until one scrape has read the final "
                   "figures, at most SECONDS (a short run ends between two scrapes)")


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {port}")
    return port


def at_least_one(text: str) -> int:
    """A count that must be 1 or more (`--limit`: SQLite reads -1 as "no limit", PostgreSQL
    refuses it — one meaning, said at the flag)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"1 or more, not {n}")
    return n


def demo_pace(n_tasks: int) -> float:
    """The console demo's pace: its tasks spread over ~DEMO_CONSOLE_S seconds, so there is
    a swarm to watch (unpaced, 100 tasks are over in about a second)."""
    return max(1.0, n_tasks / DEMO_CONSOLE_S)
