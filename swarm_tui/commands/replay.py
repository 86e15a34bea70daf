"""`swarm-tui replay RUN --at TIME`: a stored run as it was at one moment (issue 35).

TIME is a wall-clock time (`2026-12-05T14:03:20Z`, `14:03:20` on the run's day), an
offset from the start (`+2m30s`), `start`, `end`, or an event: `first-failure`,
`alert:KIND` (a delivered page, e.g. `alert:sla_breach`), `canary:ACTION` (e.g.
`canary:abort`). Every alert payload carries the command that opens its moment.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from swarm_tui.core.moments import iso, moment_iso
from swarm_tui.errors import UserError
from swarm_tui.store.moments import first_value as _one
from swarm_tui.store.moments import notable_moments

__all__ = ["notable_moments", "resolve_moment", "status_block"]

if TYPE_CHECKING:
    from swarm_tui.engine.snapshot import Snapshot
    from swarm_tui.store.conn import StoreConnection
    from swarm_tui.store.runs import RunRecord

_OFFSET = re.compile(r"\+(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")
_CLOCK = re.compile(r"\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?$")


async def resolve_moment(conn: StoreConnection, run: RunRecord, text: str) -> float:
    """The unix time TIME names for this run, within its span (one clear line if not)."""
    start = run.started_at
    end = run.finished_at or run.heartbeat_at or time.time()
    spec = text.strip()
    at: float | None
    if spec == "start":
        at = start
    elif spec == "end":
        at = end
    elif (m := _OFFSET.match(spec)) and any(m.groups()):
        h, mi, s = (float(g) if g else 0.0 for g in m.groups())
        at = start + h * 3600 + mi * 60 + s
    elif spec == "first-failure":
        at = await _one(conn, "SELECT MIN(sent_at + COALESCE(latency_ms, 0) / 1000.0) FROM "
                              "attempts WHERE run_id=? AND outcome='error'", (run.id,))
        if at is None:
            raise UserError(f"replay --at first-failure: run {run.id} has no failed call")
    elif spec.startswith("alert:"):
        kind = spec.split(":", 1)[1]
        at = await _one(conn, "SELECT MIN(at) FROM events WHERE run_id=? AND kind='control' "
                              "AND detail_json LIKE ? AND detail_json NOT LIKE ?",
                        (run.id, f"alert {kind} →%", f"alert {kind} resolved%"))
        if at is None:
            raise UserError(f"replay --at {spec}: no {kind} alert recorded for run {run.id} "
                            "(alerts are recorded when a webhook is configured)")
    elif spec.startswith("canary:"):
        action = spec.split(":", 1)[1]
        at = await _one(conn, "SELECT MIN(at) FROM canary_actions WHERE action=? AND at >= ? "
                              "AND at <= ?", (action, start, end))
        if at is None:
            raise UserError(f"replay --at {spec}: no canary {action} during run {run.id}")
    else:
        at = _wall_clock(spec, start)
    if not start - 1.0 <= at <= end + 1.0:
        raise UserError(f"replay --at {spec}: {iso(at)} is outside run {run.id} "
                        f"({iso(start)} to {iso(end)})")
    return min(max(at, start), end)


def _wall_clock(spec: str, start: float) -> float:
    try:
        if _CLOCK.match(spec):  # a time on the run's own (local) day
            day = datetime.fromtimestamp(start)
            t = datetime.strptime(spec, "%H:%M:%S" if spec.count(":") == 2 else "%H:%M")
            moment = day.replace(hour=t.hour, minute=t.minute, second=t.second,
                                 microsecond=0)
            if moment.timestamp() < start - 43_200:  # past midnight
                moment += timedelta(days=1)
            return moment.timestamp()
        return datetime.fromisoformat(spec).timestamp()
    except ValueError:
        raise UserError(f"replay --at {spec}: not a moment (a time like 14:03:20 or "
                        "2026-12-05T14:03:20Z, +2m30s, start, end, first-failure, "
                        "alert:KIND, canary:ACTION)") from None


def status_block(snap: Snapshot, at: float, started_at: float) -> str:
    """The moment as plain text, for an incident ticket."""
    from swarm_tui.core import fmt

    p50, p95, p99 = snap.latency_ms
    c = snap.counts
    lines = [
        f"run {snap.run_id} at {moment_iso(at)} (+{fmt.duration(at - started_at)}): "
        f"{snap.status}",
        f"tasks  {snap.done}/{snap.total} done — succeeded {c.get('succeeded', 0)}, "
        f"failed {c.get('failed', 0)}, in flight {snap.in_flight}",
        f"calls  {snap.calls} answered, ok {fmt.pct(snap.call_success_rate)} per call, "
        f"{fmt.pct(snap.success_rate)} per task",
        f"latency p50 {fmt.ms(p50)} / p95 {fmt.ms(p95)} / p99 {fmt.ms(p99)} ms "
        f"(SLA p95 ≤ {snap.sla.p95_ms:.0f} ms, success ≥ {snap.sla.min_success:.0%})",
        f"cost   ${snap.cost_usd:,.4f} so far",
    ]
    if snap.errors:
        lines.append("errors " + ", ".join(f"{k} {v}" for k, v in sorted(snap.errors.items())))
    lines += [f"log    {line}" for line in snap.log[-8:]]
    return "\n".join(lines)
