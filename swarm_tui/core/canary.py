"""A canary's stored record and its statuses: what the store keeps and every screen reads
(the actions that move it are canary/state.py's)."""

from __future__ import annotations

from swarm_tui.core.record import record

PROGRESSING = "progressing"  # baking the current stage; auto mode may promote or abort
PAUSED = "paused"            # held at its percentage until resume / promote
ABORTED = "aborted"          # 0 % on the candidate; retry starts over
COMPLETE = "complete"        # 100 % on the candidate
START = "start"  # the first time a canary is seen: recorded, never requested

BASELINE = "baseline"  # the bucket of every task until a canary splits traffic
CANDIDATE = "candidate"


@record(frozen=True)
class CanaryState:
    """The canary's stored row: stage, status, timers and the failure streak."""

    name: str
    baseline: str
    candidate: str
    status: str
    pct: int
    stage_started_at: float
    bake_started_at: float
    passing_since: float | None = None
    failures: int = 0
    version: int = 0
    updated_at: float = 0.0

    def stage_index(self, stages: list[int]) -> int:
        """Index of the highest configured stage at or below pct; -1 below the first."""
        idx = -1
        for i, pct in enumerate(stages):
            if pct <= self.pct:
                idx = i
        return idx

    def next_pct(self, stages: list[int]) -> int | None:
        return next((p for p in stages if p > self.pct), None)


def initial(name: str, baseline: str, candidate: str, stages: list[int], now: float
            ) -> CanaryState:
    pct = stages[0]
    return CanaryState(name, baseline, candidate, COMPLETE if pct == 100 else PROGRESSING, pct,
                       now, now, updated_at=now)
