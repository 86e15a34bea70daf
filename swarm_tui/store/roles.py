"""Who may do what on a PostgreSQL store, enforced by the server (`swarm-tui db init --roles`).

Three group roles (NOLOGIN); a person's login role is made a member of one:
- swarm_tui_reader: SELECT — runs, report, cost, export, watch, keys list, canary status;
- swarm_tui_operator: the reader's, plus the control queue (pause, resume, cancel,
  concurrency, key retire/enable) and moving the canary — through the audited functions
  only (store/audited.py: they write the row and its audit line with session_user);
- swarm_tui_executor: the run tables — run, resume, worker — but not the canary, its
  audit log or the control queue except through the same functions (it marks commands
  done and appends its own events).
Tables a later migration adds are covered by default privileges of the role that runs
`db init`.
"""

from __future__ import annotations

import re

from swarm_tui.store.audited import FUNCTIONS
from swarm_tui.store.conn import StoreConnection

READER, OPERATOR, EXECUTOR = "swarm_tui_reader", "swarm_tui_operator", "swarm_tui_executor"
ROLES = (READER, OPERATOR, EXECUTOR)
# what no role writes itself: the functions of store/audited.py write these with their
# audit line (the executor keeps marking commands done and logging its own events)
AUDITED = {"canary": "INSERT, UPDATE, DELETE", "canary_actions": "INSERT, UPDATE, DELETE",
           "control": "INSERT, DELETE", "events": "UPDATE, DELETE"}


def _script(schema: str) -> str:
    create = "".join(
        f"IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{r}') THEN "
        f"CREATE ROLE {r} NOLOGIN; END IF; " for r in ROLES)
    grants = [
        f"DO $$ BEGIN {create}END $$",
        f"GRANT USAGE ON SCHEMA {schema} TO {READER}, {OPERATOR}, {EXECUTOR}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {READER}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT ON TABLES TO {READER}",
        f"GRANT {READER} TO {OPERATOR}",
        # the operator's writes are the audited functions' (a pause, a canary move)
        f"REVOKE INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} FROM {OPERATOR}",
        *(f"GRANT EXECUTE ON FUNCTION {schema}.{f} TO {OPERATOR}" for f in FUNCTIONS),
        f"GRANT {OPERATOR} TO {EXECUTOR}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {EXECUTOR}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT, INSERT, UPDATE, DELETE ON "
        f"TABLES TO {EXECUTOR}",
        *(f"REVOKE {what} ON {table} FROM {EXECUTOR}" for table, what in AUDITED.items()),
    ]
    return ";\n".join(grants) + ";"


async def create_roles(conn: StoreConnection) -> str:
    """Create the roles (if missing) and grant them on the current schema; its name."""
    async with conn.execute("SELECT current_schema()") as cur:
        schema = str((await cur.fetchone())[0])
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", schema):
        raise ValueError(f"schema name {schema!r}: only plain lower-case names are supported")
    await conn.executescript(_script(schema))
    return schema
