"""A stored run's succeeded tasks summed by the database for the cost report: one row per
(model, gateway, bucket, key, estimated, priced, timeline step) instead of one per task,
so `cost` and `report` of a 100,000-task run read a few hundred rows, not 100,000.

Repricing sums is exact: a price is linear in the tokens (cached input at its own rate;
cached_in is summed as stored, and a row never reports more cached than input tokens).
"""

from __future__ import annotations

from swarm_tui.core.record import record
from swarm_tui.core.states import TaskState
from swarm_tui.store.conn import StoreConnection, dialect_of


@record(slots=True)
class CostGroup:
    """`tasks` succeeded tasks summed; satisfies engine.cost.CostRow."""

    model: str
    gateway: str
    bucket: str
    key_fp: str | None
    usage_estimated: bool
    cost_usd: float | None          # None: unpriced (every task of the group is)
    tokens_in: int
    tokens_out: int
    cached_in: int
    tasks: int
    finished_s: float | None        # the middle of its timeline step (seconds into the run)
    state: str = TaskState.SUCCEEDED


# A task's timeline step, clamped to [0, steps - 1]: SQLite's two-argument MIN/MAX and its
# truncating CAST are PostgreSQL's LEAST/GREATEST and FLOOR (its CAST rounds).
STEP_SQL = {"sqlite": "MIN(?, MAX(0, CAST((finished_at - ?) / ? * ? AS INTEGER)))",
            "postgresql": "LEAST(?, GREATEST(0, FLOOR((finished_at - ?) / ? * ?)::BIGINT))"}


def cost_groups_sql(wall_s: float, dialect: str = "sqlite") -> str:
    """The sums' query; every column it reads is in the results_cost index."""
    step_sql = STEP_SQL[dialect] if wall_s > 0 else "0 + 0 * (? + ? + ? + ?)"
    return (f"SELECT model, gateway, bucket, key_fp, usage_estimated, cost_usd IS NULL, "
            f"{step_sql} AS step, COUNT(*), SUM(tokens_in), SUM(tokens_out), SUM(cached_in), "
            "SUM(cost_usd) FROM results WHERE run_id = ? AND state = ? "
            "GROUP BY 1, 2, 3, 4, 5, 6, 7")


async def cost_groups(conn: StoreConnection, run_id: str, started_at: float,
                      wall_s: float, steps: int) -> list[CostGroup]:
    """Succeeded tasks summed per breakdown key and timeline step (`steps` equal parts of
    `wall_s`, as engine.cost's timeline cuts them)."""
    params = (steps - 1, started_at, wall_s or 1.0, steps, run_id, str(TaskState.SUCCEEDED))
    async with conn.execute(cost_groups_sql(wall_s, dialect_of(conn)), params) as cur:
        rows = await cur.fetchall()
    return [CostGroup(model=m, gateway=g, bucket=b, key_fp=k, usage_estimated=bool(est),
                      cost_usd=None if unpriced else float(cost or 0.0), tokens_in=int(t_in),
                      tokens_out=int(t_out), cached_in=int(cached), tasks=int(n),
                      finished_s=(step + 0.5) / steps * wall_s if wall_s > 0 else None)
            for m, g, b, k, est, unpriced, step, n, t_in, t_out, cached, cost in rows]
