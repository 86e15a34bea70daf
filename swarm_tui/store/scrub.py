"""Data steps of migrations (store/schema.py: DATA_STEPS), run in the step's transaction."""

from __future__ import annotations

import json

from swarm_tui.redact import scrub_settings
from swarm_tui.store.conn import StoreConnection


async def scrub_configs(conn: StoreConnection) -> None:
    """Stored runs' configs written before secrets were typed as such: webhook URLs to
    their tag, base_url / OTLP endpoint without userinfo."""
    async with conn.execute("SELECT id, config_json FROM runs WHERE config_json IS NOT NULL"
                            ) as cur:
        rows = list(await cur.fetchall())
    for run_id, raw in rows:
        try:
            snap = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(snap, dict):
            continue
        before = json.dumps(snap, sort_keys=True)
        if isinstance(snap.get("settings"), dict):
            scrub_settings(snap["settings"])
        scrub_settings(snap)  # the snapshot's own `gateways` (base_url per gateway)
        if json.dumps(snap, sort_keys=True) != before:
            await conn.execute("UPDATE runs SET config_json=? WHERE id=?",
                               (json.dumps(snap), run_id))


async def audit_functions(conn: StoreConnection) -> None:
    from swarm_tui.store.audited import create_functions

    await create_functions(conn)


async def run_data_step(conn: StoreConnection, step: int) -> None:
    from swarm_tui.store.schema import DATA_STEPS

    name = DATA_STEPS.get(step)
    if name is not None:
        await globals()[name](conn)
