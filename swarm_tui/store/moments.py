"""A stored run's notable moments: where on-call looks first (issue 35)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swarm_tui.store.conn import StoreConnection
    from swarm_tui.store.runs import RunRecord


async def first_value(conn: StoreConnection, sql: str, params: tuple) -> float | None:
    async with conn.execute(sql, params) as cur:
        row = await cur.fetchone()
    return None if row is None or row[0] is None else float(row[0])


# events worth a moment of their own, by what their stored line says
_NOTABLE = (("quota spent", "key out of quota"), ("429 storm", "429 storm: key cooling"),
            ("(aborted)", "canary aborted"), ("paused", "paused"),
            ("→", "alert delivered"))


async def notable_moments(conn: StoreConnection, run: RunRecord, limit: int = 12, *,
                          first_failure: tuple[float | None] | None = None
                          ) -> list[tuple[float, str]]:
    """(when, what) of the run's notable moments, oldest first: its first failed call and
    first fallback, key cooldowns, alerts, pauses and canary moves (each kind at most
    thrice: a storm of one kind is one line, not forty). `first_failure`: when the caller
    already knows when the first failed call was answered (a replay's timeline), as a
    1-tuple — reading it walks every call of the run (~30 ms at 100,000 tasks)."""
    found: list[tuple[float, str]] = []
    first = first_failure[0] if first_failure is not None else await first_value(
        conn, "SELECT MIN(sent_at + COALESCE(latency_ms, 0) / 1000.0) FROM attempts "
        "WHERE run_id=? AND outcome='error'", (run.id,))
    if first is not None:
        found.append((first, "first failed call"))
    fallback = await first_value(conn, "SELECT MIN(at) FROM events WHERE run_id=? AND "
                                "kind='fallback'", (run.id,))
    if fallback is not None:
        found.append((fallback, "first fallback"))
    seen: dict[str, int] = {}
    async with conn.execute("SELECT at, detail_json FROM events WHERE run_id=? AND "
                            "kind='control' ORDER BY id", (run.id,)) as cur:
        rows = await cur.fetchall()
    for at, detail in rows:
        text = str(detail or "")
        for needle, what in _NOTABLE:
            if needle in text and (needle != "→" or text.startswith("alert ")):
                label = text.split(":", 1)[0] if needle == "→" else what
                if seen.get(label, 0) < 3:
                    seen[label] = seen.get(label, 0) + 1
                    found.append((float(at), label))
                break
    end = run.finished_at or run.heartbeat_at or time.time()
    async with conn.execute("SELECT at, action, to_pct FROM canary_actions WHERE at >= ? "
                            "AND at <= ? ORDER BY at", (run.started_at, end)) as cur:
        for at, action, pct in await cur.fetchall():
            found.append((float(at), f"canary {action} → {pct}%"))
    return sorted(found)[:limit]
