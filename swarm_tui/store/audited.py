"""On PostgreSQL, the audited writes go through functions the operator cannot write around.

The operator's and the executor's roles may not INSERT / UPDATE the control queue, the
canary or its audit log directly (store/roles.py revokes it). They call these functions,
SECURITY DEFINER and owned by the role that migrated the database, which write the row
*and* its audit line, naming the database role from `session_user` — a value the caller
cannot choose (the OS user beside it is the caller's word, as before). Created by the
migration to schema 12 (store/schema.py: DATA_STEPS); SQLite has no roles and writes the
same rows itself (store/control.py, store/canary.py).
"""

from __future__ import annotations

from swarm_tui.store.conn import StoreConnection, dialect_of

QUEUE = "swarm_tui_queue_command"
CANARY_CREATE = "swarm_tui_canary_create"
CANARY_MOVE = "swarm_tui_canary_move"
FUNCTIONS = (f"{QUEUE}(text, text, text, text)",
             f"{CANARY_CREATE}(text, text, text, text, bigint, double precision, "
             "double precision, double precision, text, text, text)",
             f"{CANARY_MOVE}(text, bigint, text, bigint, double precision, double precision, "
             "double precision, bigint, double precision, text, text, text, bigint, text, "
             "text, text)")
# who did it, as the audit names them: the caller's OS user and the role it logged in as
_WHO = "p_actor || ' (db: ' || session_user || ')'"


def _script(schema: str) -> str:
    head = ("LANGUAGE plpgsql SECURITY DEFINER "
            f"SET search_path = {schema}, pg_temp AS $fn$")
    return f"""
CREATE OR REPLACE FUNCTION {QUEUE}(p_run text, p_command text, p_arg text, p_actor text)
RETURNS void {head}
BEGIN
  INSERT INTO control (run_id, at, actor, command, arg)
  VALUES (p_run, extract(epoch FROM clock_timestamp()), {_WHO}, p_command, p_arg);
  PERFORM pg_notify('swarm_tui_control', p_run);
END $fn$;

CREATE OR REPLACE FUNCTION {CANARY_CREATE}(p_name text, p_baseline text, p_candidate text,
    p_status text, p_pct bigint, p_stage_started double precision,
    p_bake_started double precision, p_updated double precision, p_actor text,
    p_source text, p_reason text)
RETURNS boolean {head}
BEGIN
  INSERT INTO canary (name, baseline, candidate, status, pct, stage_started_at,
      bake_started_at, passing_since, failures, version, updated_at)
  VALUES (p_name, p_baseline, p_candidate, p_status, p_pct, p_stage_started, p_bake_started,
      NULL, 0, 0, p_updated)
  ON CONFLICT (name) DO NOTHING;
  IF NOT FOUND THEN RETURN false; END IF;
  INSERT INTO canary_actions (name, at, action, actor, source, from_pct, to_pct,
      from_status, to_status, reason, metrics_json)
  VALUES (p_name, p_updated, 'start', {_WHO}, p_source, NULL, p_pct, NULL, p_status,
      p_reason, NULL);
  RETURN true;
END $fn$;

CREATE OR REPLACE FUNCTION {CANARY_MOVE}(p_name text, p_version bigint, p_status text,
    p_pct bigint, p_stage_started double precision, p_bake_started double precision,
    p_passing_since double precision, p_failures bigint, p_updated double precision,
    p_action text, p_actor text, p_source text, p_from_pct bigint, p_from_status text,
    p_reason text, p_metrics text)
RETURNS boolean {head}
BEGIN
  UPDATE canary SET status = p_status, pct = p_pct, stage_started_at = p_stage_started,
      bake_started_at = p_bake_started, passing_since = p_passing_since,
      failures = p_failures, version = p_version + 1, updated_at = p_updated
  WHERE name = p_name AND version = p_version;
  IF NOT FOUND THEN RETURN false; END IF;
  IF p_action IS NOT NULL THEN
    INSERT INTO canary_actions (name, at, action, actor, source, from_pct, to_pct,
        from_status, to_status, reason, metrics_json)
    VALUES (p_name, p_updated, p_action, {_WHO}, p_source, p_from_pct, p_pct, p_from_status,
        p_status, p_reason, p_metrics);
  END IF;
  PERFORM pg_notify('swarm_tui_canary', p_name);
  RETURN true;
END $fn$;
""" + "".join(f"REVOKE ALL ON FUNCTION {f} FROM PUBLIC;\n" for f in FUNCTIONS)


async def create_functions(conn: StoreConnection) -> None:
    """The migration's data step: on PostgreSQL only (SQLite has no roles to bypass)."""
    if dialect_of(conn) != "postgresql":
        return
    async with conn.execute("SELECT current_schema()") as cur:
        schema = str((await cur.fetchone())[0])
    await conn.executescript(_script(schema))


def on_server(conn: StoreConnection) -> bool:
    return dialect_of(conn) == "postgresql"
