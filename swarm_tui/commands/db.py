"""`swarm-tui db init [--roles]` and `swarm-tui db copy SRC DST [--run ID ...]`."""

from __future__ import annotations

import argparse
import sqlite3
import sys

from swarm_tui.errors import UserError
from swarm_tui.store.copy import copy_runs
from swarm_tui.store.db import db_error, open_db, resolve_db_target
from swarm_tui.store.roles import EXECUTOR, OPERATOR, READER, create_roles
from swarm_tui.store.schema import SCHEMA_VERSION
from swarm_tui.store.target import PgTarget


async def init(args: argparse.Namespace) -> int:
    target = resolve_db_target(args.db)
    conn = await open_db(target)  # creates and migrates
    try:
        print(f"database {target}: swarm-tui schema version {SCHEMA_VERSION}")
        if args.roles:
            if not isinstance(target, PgTarget):
                raise UserError(f"database {target}: roles are PostgreSQL's; a SQLite file's "
                                "readers are its file mode (0600: the owner only)")
            try:
                schema = await create_roles(conn)
            except sqlite3.Error as e:
                raise db_error(target, e) from None
            print(f"roles on schema {schema}: {READER} (read: runs, report, cost, export, "
                  f"watch), {OPERATOR} (+ pause, cancel, concurrency, keys, canary), "
                  f"{EXECUTOR} (+ run, resume, worker)\n"
                  f"grant one to a login role, e.g.: GRANT {READER} TO alice;")
    finally:
        await conn.close()
    return 0


async def copy(args: argparse.Namespace) -> int:
    src_target = resolve_db_target(args.src, "db copy SRC")
    dst_target = resolve_db_target(args.dst, "db copy DST")
    if str(src_target) == str(dst_target):
        raise UserError(f"db copy: {src_target} is both source and destination")
    src = await open_db(src_target, create=False)
    try:
        dst = await open_db(dst_target)
        try:
            try:
                report = await copy_runs(src, dst, args.run or None)
            except sqlite3.Error as e:
                raise db_error(dst_target, e) from None
        finally:
            await dst.close()
    finally:
        await src.close()
    unknown = sorted(set(args.run or ()) - set(report.copied + report.present + report.running))
    print(f"copied {len(report.copied)} runs ({report.rows:,} rows) from {src_target} to "
          f"{dst_target}; {len(report.present)} already there")
    if report.running:
        print(f"swarm-tui: skipped {len(report.running)} runs still executing: "
              f"{', '.join(report.running)}", file=sys.stderr)
    if unknown:
        raise UserError(f"db copy: no run {', '.join(unknown)} in {src_target}")
    return 0
