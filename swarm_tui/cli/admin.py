"""The tools around runs: `db`, `canary`, `keys`, `sim`, `completion` — each parser beside
its handler (the work is in commands/)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from swarm_tui.cli.flags import at_least_one, common_flags, sim_flags
from swarm_tui.cli.shared import brief_with_db, run_async, sim_settings
from swarm_tui.errors import EXIT_OK, UserError


def add_completion(sub: argparse._SubParsersAction) -> None:
    completion = sub.add_parser(
        "completion", help="print the shell completion script: "
        "eval \"$(swarm-tui completion bash)\" (zsh: the same; fish: "
        "swarm-tui completion fish | source)")
    completion.add_argument("shell", choices=["bash", "zsh", "fish"],
                            help="the shell to print the completion script for")


def cmd_completion(args: argparse.Namespace) -> int:
    import argcomplete

    print(argcomplete.shellcode(["swarm-tui"], shell=args.shell))
    return EXIT_OK


def add_db(sub: argparse._SubParsersAction) -> None:
    db = sub.add_parser("db", help="the database: create it (and PostgreSQL roles), copy runs "
                        "between databases")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    init = db_sub.add_parser("init", help="create or migrate the schema of --db")
    common_flags(init)
    init.add_argument("--roles", action="store_true",
                      help="PostgreSQL: create the reader / operator / executor roles and "
                      "their grants")
    copy = db_sub.add_parser("copy", help="copy stored runs from SRC into DST (SQLite file or "
                             "postgresql:// URL each); runs already in DST are skipped")
    common_flags(copy)
    copy.add_argument("src", help="the database the runs are read from")
    copy.add_argument("dst", help="the database they go to (created if it is a new file)")
    copy.add_argument("--run", action="append", metavar="RUN_ID",
                      help="only this run (repeatable; default: every run not executing)")


def cmd_db(args: argparse.Namespace) -> int:
    from swarm_tui.commands import db

    if args.db_command == "copy":  # SRC, DST: as --db (a password in a URL is refused)
        return run_async(db.copy(args))
    return run_async(db.init(args))


def add_canary(sub: argparse._SubParsersAction) -> None:
    # the names alone: the canary's state and records are its commands' to import
    from swarm_tui.canary.actions import ACTIONS

    verbs = ("status", "history", *ACTIONS)
    p = sub.add_parser("canary", help="the gateway canary: status, promote, abort, history")
    common_flags(p)
    p.add_argument("verb", choices=verbs, metavar="{" + ",".join(verbs) + "}",
                   help="status / history read; the rest move the canary (audited)")
    p.add_argument("pct", nargs="?", help="for `set`: the candidate's share of users, 1-100")
    p.add_argument("--reason", help="why (kept in the audit log)")
    p.add_argument("--json", action="store_true", help="status / history as JSON")
    p.add_argument("--limit", type=at_least_one, default=20, help="history entries (default 20)")
    p.add_argument("--readonly", action="store_true", default=argparse.SUPPRESS,
                   help="refuse any action that changes it (also before the sub-command)")


def cmd_canary(args: argparse.Namespace) -> int:
    from swarm_tui.commands import canary
    from swarm_tui.commands.config_copy import read_view

    cfg = read_view(args.config)
    canary.canary_config(cfg)  # no canary configured: say so before touching the database
    return brief_with_db(args, canary.run, cfg, args)


def add_keys(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keys", help="API keys: list, add (stdin/env), retire, enable")
    common_flags(p)
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


def cmd_keys(args: argparse.Namespace) -> int:
    from swarm_tui.commands import keys
    from swarm_tui.commands.config_copy import read_view

    cfg = read_view(args.config)
    if args.insecure_key_file:
        print("swarm-tui: warning: accepting key files readable by group/others",
              file=sys.stderr)
    if args.readonly and args.verb in ("add", "retire", "enable"):
        raise UserError(f"keys {args.verb}: refused, --readonly")
    if args.verb == "add":  # a file operation: no database needed
        if args.fingerprint is not None:  # never echo it: it may be the key itself
            raise UserError("keys add: the key is read from standard input or --from-env VAR, "
                            "never from the command line (shell history, ps)")
        return keys.run_add(cfg, args)
    return brief_with_db(args, keys.run, cfg, args)


def add_sim(sub: argparse._SubParsersAction) -> None:
    sim = sub.add_parser("sim", help="serve the simulator gateway for any OpenAI client")
    common_flags(sim)
    sim.add_argument("--host", default="127.0.0.1",
                     help="address to listen on (default 127.0.0.1: this machine only)")
    sim.add_argument("--port", type=int, default=8787, help="port (default 8787)")
    sim_flags(sim)
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


def cmd_sim(args: argparse.Namespace) -> int:
    from swarm_tui.sim.server import serve_child, serve_forever

    if args.stdin_control:  # a child of `run` / the console: settings arrive on stdin
        serve_child()
        return EXIT_OK
    settings = sim_settings(args)
    try:
        serve_forever(settings, args.host, args.port)
    except OSError as e:
        raise UserError(f"simulator {args.host}:{args.port}: cannot listen: {e.strerror}") from None
    return EXIT_OK
