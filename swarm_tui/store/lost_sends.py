"""Calls that were sent and whose answers were lost with their executor (kill -9, a host
gone): booked as attempts with outcome `lost`, so `report` and `cost` show what may have
been paid without an answer, and a task sent again counts as SENT MORE THAN ONCE.

The record is the executor's last heartbeat: every flush writes the calls in flight with
the live figures (store/writer.py), in the same transaction as the rows — so a call in
it has no stored answer as of that commit. A call sent after the last commit (one flush
interval, 0.25 s) is not in it: that window is what stays unrecorded after a kill -9.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from swarm_tui.store.conn import StoreConnection

LOST = "lost"
_ENTRY_FIELDS = 9  # the writer's in-flight entry; older heartbeats had 5 (no attempt)

INSERT_LOST = """
INSERT INTO attempts (uid, run_id, seq, number, model, gateway, key_fp, sent_at, queue_ms,
    latency_ms, ttft_ms, status_code, error_class, error_message, retry_wait_s, tokens_in,
    tokens_out, cached_in, outcome)
SELECT ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, NULL, NULL, 'lost',
    'sent; its executor ended before the answer was stored', NULL, ?, 0, 0, 'lost'
WHERE NOT EXISTS (SELECT 1 FROM attempts WHERE run_id = ? AND seq = ? AND number >= ?)
ON CONFLICT (uid) DO NOTHING
"""


# An answer that arrives after its call was booked lost (a stopped worker's salvage, a
# journal imported) replaces the `lost` row of the same attempt: one row per call sent.
SUPERSEDE_LOST = ("DELETE FROM attempts WHERE run_id = ? AND seq = ? AND number = ? "
                  "AND outcome = 'lost'")


async def supersede_lost(conn: StoreConnection, attempt_rows: list[tuple]) -> None:
    """Before inserting attempt rows (uid, run_id, seq, number, …) written late."""
    if attempt_rows:
        await conn.executemany(SUPERSEDE_LOST, [(r[1], r[2], r[3]) for r in attempt_rows])


async def book_lost_sends(conn: StoreConnection, run_id: str, owner: str,
                          live_json: str | None, seqs: range | None = None) -> int:
    """Book the calls a dead executor (`owner`: its claim token or worker name) had in
    flight at its last heartbeat — only those of `seqs` if given (a batch taken over) —
    unless their answer is stored after all (a journal): idempotent, by uid. Returns how
    many entries it offered."""
    entries = [e for e in _entries(live_json) if seqs is None or e[0] in seqs]
    if not entries:
        return 0
    rows = [(f"lost:{owner}:{seq}:{number}", run_id, seq, number, model, gateway, key_fp,
             sent, tokens_in, run_id, seq, number)
            for seq, _state, sent, _chars, model, number, gateway, key_fp, tokens_in
            in entries if number is not None]
    if rows:
        await conn.executemany(INSERT_LOST, rows)
    return len(rows)


def _entries(live_json: str | None) -> Iterable[list]:
    if not live_json:
        return []
    try:
        agents = json.loads(live_json).get("agents") or []
    except (ValueError, AttributeError):
        return []
    return [a[:_ENTRY_FIELDS] for a in agents
            if isinstance(a, list) and len(a) >= _ENTRY_FIELDS]


async def lost_sends(conn: StoreConnection, run_id: str) -> tuple[int, int]:
    """(calls sent whose answers were lost, their prompts' estimated tokens)."""
    async with conn.execute("SELECT COUNT(*), COALESCE(SUM(tokens_in), 0) FROM attempts "
                            "WHERE run_id = ? AND outcome = 'lost'", (run_id,)) as cur:
        row = await cur.fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)
