"""Which model and which gateway a task goes to."""

from __future__ import annotations

import hashlib
from typing import Protocol

from swarm_tui.core.canary import BASELINE, CANDIDATE
from swarm_tui.core.records import TaskHead
from swarm_tui.settings.sections import RoutingConfig
from swarm_tui.workload import Task


def canary_slot(user_id: str) -> int:
    """The team's router: int(sha256(user_id UTF-8).hexdigest(), 16) % 100."""
    return int(hashlib.sha256(user_id.encode("utf-8")).hexdigest(), 16) % 100


def choose_model(
    task: Task | TaskHead, routing: RoutingConfig, default_model: str, pinned: str | None = None
) -> str:
    """Explicit task model > model pinned by the gateway > long/short rule > default."""
    if task.model:
        return task.model
    if pinned:
        return pinned
    if not routing.enabled:
        return default_model
    if task.prompt_tokens_estimate() > routing.long_context_tokens:
        return routing.long_model
    return routing.short_model


def fallback_chain(model: str, routing: RoutingConfig) -> tuple[str, ...]:
    # a tuple: every agent on one model can share it (a list each was ~90 B per task)
    return tuple(m for m in routing.fallback.get(model, []) if m != model)


class Router(Protocol):
    # Bumped whenever routing changes: a task not yet sent is routed again at dispatch.
    version: int

    def route(self, task: Task | TaskHead) -> tuple[str, str]:
        """(gateway name, bucket)."""
        ...


class SingleGateway:
    version = 0

    def __init__(self, gateway: str) -> None:
        self.gateway = gateway

    def route(self, task: Task | TaskHead) -> tuple[str, str]:
        return self.gateway, BASELINE


class CanaryRouter:
    """The team's split: a user goes to the candidate when canary_slot(user) < pct.

    Raising pct only adds slots, so no user ever moves back to the baseline while a
    canary is promoted. Tasks without a user id use the task id (Task.user_key).
    """

    def __init__(self, baseline: str, candidate: str, pct: int = 0) -> None:
        self.baseline = baseline
        self.candidate = candidate
        self.pct = pct
        self.version = 0

    def set_pct(self, pct: int) -> None:
        if pct != self.pct:
            self.pct = pct
            self.version += 1

    def route(self, task: Task | TaskHead) -> tuple[str, str]:
        if canary_slot(task.routing_user) < self.pct:
            return self.candidate, CANDIDATE
        return self.baseline, BASELINE
