"""How long to wait before the next attempt: Retry-After when given, else full jitter."""

from __future__ import annotations

import random

from swarm_tui.settings.run_sections import RetryConfig


def retry_wait_s(
    policy: RetryConfig, attempt_on_model: int, retry_after_s: float | None, rng: random.Random
) -> float:
    """attempt_on_model is 1 after the first failure. Retry-After is honoured up to the cap."""
    if retry_after_s is not None:
        return min(policy.retry_after_cap_s, retry_after_s)
    ceiling = min(policy.max_backoff_s, policy.base_backoff_s * (2 ** (attempt_on_model - 1)))
    return rng.uniform(0.0, ceiling)
