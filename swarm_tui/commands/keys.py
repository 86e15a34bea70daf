"""`swarm-tui keys list|add|retire|enable`.

A key is read from standard input (masked when it is a terminal) or from an
environment variable — never from the command line, where `ps` and shell
history would keep it. `add` appends to the gateway's key file, which running
swarms reload within a second; retire / enable reach running swarms through the
store's control table, by fingerprint.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import stat
import sys
import time
from pathlib import Path

from swarm_tui.core.plain import as_plain
from swarm_tui.core.record import record, replace
from swarm_tui.core.states import KeyState, RunStatus
from swarm_tui.errors import EXIT_OK, UserError
from swarm_tui.gateway.keys import fingerprint, key_problem, keys_from_env, read_key_file
from swarm_tui.settings.view import ConfigView
from swarm_tui.store import reads
from swarm_tui.store.conn import StoreConnection
from swarm_tui.store.control import queue_command
from swarm_tui.store.runs import list_runs
from swarm_tui.store.target import DbTarget

FRESH_S = 5.0  # key state older than this belongs to a run that is no longer alive


@record(kw_only=True)
class KeyListing:
    """One key as `keys list` shows it: where it is configured, and its live state."""

    gateway: str
    fingerprint: str
    label: str | None
    source: str
    state: str | None = None        # live state in a running swarm, if any
    cooling_until: float | None = None
    reason: str | None = None
    in_flight: int | None = None
    calls: int | None = None
    rate_limited: int | None = None
    errors: int | None = None
    run_id: str | None = None


def _gateway(cfg: ConfigView, name: str | None) -> str:
    gws = cfg.settings.gateways
    if not gws:
        raise UserError("keys: no gateways configured (the built-in simulator uses a "
                        "generated in-memory key)")
    if name:
        if name not in gws:
            raise UserError(f"--gateway {name}: no such gateway (known: {', '.join(sorted(gws))})")
        return name
    if cfg.settings.default_gateway:
        return cfg.settings.default_gateway
    if len(gws) == 1:
        return next(iter(gws))
    raise UserError("keys: several gateways; pass --gateway NAME")


def configured(cfg: ConfigView, insecure: bool) -> list[KeyListing]:
    out = []
    for name, gw in cfg.settings.gateways.items():
        for key, label in keys_from_env(gw.key_env):
            out.append(KeyListing(gateway=name, fingerprint=fingerprint(key), label=label,
                                  source=f"env:{label}"))
        if gw.key_file is not None and gw.key_file.expanduser().exists():
            for key, label in read_key_file(gw.key_file.expanduser(), insecure):
                out.append(KeyListing(gateway=name, fingerprint=fingerprint(key), label=label,
                                      source="file"))
    return out


async def _live(conn: StoreConnection) -> list[tuple]:
    """Key rows of swarms alive right now (their heartbeat refreshes them)."""
    return await reads.live_key_rows(conn, FRESH_S)


async def run(conn: StoreConnection, path: DbTarget, cfg: ConfigView,
              args: argparse.Namespace) -> int:
    if args.verb == "list":
        return await _list(conn, cfg, args)
    if not args.fingerprint:
        raise UserError(f"keys {args.verb}: give the key's fingerprint (see `keys list`)")
    return await _steer(conn, args)


async def _list(conn: StoreConnection, cfg: ConfigView, args: argparse.Namespace) -> int:
    items = {(k.gateway, k.fingerprint): k for k in configured(cfg, args.insecure_key_file)}
    for (run_id, gw, fp, label, source, state, until, reason, fly, calls, r429,
         errs) in await _live(conn):
        item = items.get((gw, fp)) or KeyListing(gateway=gw, fingerprint=fp, label=label,
                                                 source=source)
        items[(gw, fp)] = replace(item, state=state, cooling_until=until, reason=reason,
                                  in_flight=fly, calls=calls, rate_limited=r429, errors=errs,
                                  run_id=run_id)
    rows = [k for k in items.values() if not args.gateway or k.gateway == args.gateway]
    if args.json:
        print(json.dumps([as_plain(k) for k in rows], indent=2))
        return EXIT_OK
    if not rows:
        print("no keys configured")
        return EXIT_OK
    print(f"{'gateway':<12} {'key':<22} {'label':<14} {'source':<12} state")
    for k in rows:
        if k.state is None:
            live = "(not in a running swarm)"
        else:
            live = k.state
            if k.state == KeyState.COOLING and k.cooling_until:
                live += " until " + time.strftime("%H:%M:%S", time.localtime(k.cooling_until))
            if k.reason:
                live += f": {k.reason}"
            live += f"  {k.calls} calls, {k.rate_limited} 429s, {k.errors} errors, " \
                    f"{k.in_flight} in flight (run {k.run_id})"
        print(f"{k.gateway:<12} {k.fingerprint:<22} {(k.label or '-')[:14]:<14} "
              f"{k.source:<12} {live}")
    return EXIT_OK


def _read_secret(args: argparse.Namespace) -> str:
    if args.from_env:
        secret = os.environ.get(args.from_env, "")
        if not secret.strip():
            raise UserError(f"keys add: ${args.from_env} is empty or not set")
    elif sys.stdin is not None and sys.stdin.isatty():
        import getpass  # here: only `keys add` at a terminal asks

        secret = getpass.getpass("API key (not echoed): ")
    else:
        secret = sys.stdin.readline() if sys.stdin is not None else ""
    secret = secret.strip()
    problem = key_problem(secret)
    if problem is not None:
        raise UserError(f"keys add: that is not an API key: {problem}")
    return secret


def run_add(cfg: ConfigView, args: argparse.Namespace) -> int:
    name = _gateway(cfg, args.gateway)
    gw = cfg.settings.gateways[name]
    if gw.key_file is None:
        raise UserError(f"gateway '{name}': no key_file in the config; `keys add` appends to "
                        "it (env keys are set in the environment)")
    secret = _read_secret(args)
    path = gw.key_file.expanduser()
    existing = read_key_file(path, args.insecure_key_file) if path.exists() else []
    fp = fingerprint(secret)
    if any(k == secret for k, _ in existing):
        print(f"key {fp}: already in {path}")
        return EXIT_OK
    label = (args.label or "").strip()
    if any(c.isspace() or c == "#" for c in label):
        raise UserError("--label: one word, no '#'")
    line = secret + (f" {label}" if label else "") + "\n"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # a folder it makes: its own
        # created 0600, appended in one write: a reloading runner never sees half a line
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, stat.S_IRUSR | stat.S_IWUSR)
        size = os.fstat(fd).st_size
        try:
            prefix = "" if not existing or _ends_with_newline(path) else "\n"
            data = (prefix + line).encode()
            if os.write(fd, data) != len(data):  # a disk with room for part of it
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            # half a key is a wrong key a reloading runner would send: back to what it was
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
        finally:
            os.close(fd)
    except OSError as e:
        raise UserError(f"key file {path}: cannot write ({e.strerror})") from None
    print(f"key {fp}: added to {path} (gateway {name}); running swarms pick it up within "
          "a second")
    return EXIT_OK


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() == 0:
            return True
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


async def _steer(conn: StoreConnection, args: argparse.Namespace) -> int:
    """retire / enable in every running swarm that holds the key."""
    ref = args.fingerprint
    running = {r.id for r in await list_runs(conn, 200)
               if r.effective_status() == RunStatus.RUNNING}
    targets: dict[str, str] = {}
    for run_id, gw, fp, *_ in await _live(conn):
        if run_id in running and (not args.gateway or gw == args.gateway) and (
                fp == ref or ref in fp):
            targets.setdefault(run_id, f"{gw}:{fp}")
    matched = set(targets.values())
    if not targets:
        raise UserError(f"keys {args.verb} {ref}: no running swarm holds that key (`keys "
                        "list` shows fingerprints; edit the key file for future runs)")
    if len(matched) > 1:
        raise UserError(f"keys {args.verb} {ref}: matches several keys "
                        f"({', '.join(sorted(matched))}); give more of the fingerprint")
    for run_id, target in targets.items():
        await queue_command(conn, run_id, f"key_{args.verb}", target)
    print(f"key {next(iter(matched))}: {args.verb} sent to {len(targets)} running swarm(s); "
          "applied within a second")
    if args.verb == "retire":
        print("(for future runs, remove it from the key file / environment)", file=sys.stderr)
    return EXIT_OK

