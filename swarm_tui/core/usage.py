"""The one aggregation of what succeeded tasks used and cost: the run summary, the cost
view and the canary's per-bucket figures all add their rows here, so "tokens per task",
"cost per task" and "unpriced" mean the same thing everywhere."""

from __future__ import annotations

from swarm_tui.core.record import field, record


@record(slots=True)
class Usage:
    """Tokens and cost summed over succeeded tasks."""

    tasks: int = 0                   # succeeded tasks added
    tokens_in: int = 0
    tokens_out: int = 0
    cached_in: int = 0
    estimated_tasks: int = 0         # usage estimated (the gateway reported none)
    unpriced_tasks: int = 0          # no price for the model: never counted as $0
    cost_usd: float = 0.0            # priced tasks only
    unpriced_models: set[str] = field(default_factory=set)

    def add(self, tokens_in: int, tokens_out: int, cost_usd: float | None, *,
            cached_in: int = 0, estimated: bool = False, model: str | None = None,
            tasks: int = 1) -> None:
        """One task, or `tasks` of them summed already (a stored run's aggregate rows)."""
        self.tasks += tasks
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        self.cached_in += cached_in
        self.estimated_tasks += tasks if estimated else 0
        if cost_usd is None:
            self.unpriced_tasks += tasks
            if model is not None:
                self.unpriced_models.add(model)
        else:
            self.cost_usd += cost_usd

    @property
    def priced_tasks(self) -> int:
        return self.tasks - self.unpriced_tasks

    @property
    def cost_per_task_usd(self) -> float | None:
        """Over priced tasks only; None when none was priced."""
        return self.cost_usd / self.priced_tasks if self.priced_tasks else None
