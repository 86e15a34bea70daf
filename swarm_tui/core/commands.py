"""The commands an operator can send a running swarm: from the console in its process, or
queued through the store (`watch --write`, `keys retire`, another process). The engine
applies them (engine/control.py `apply_command`); the store keeps them as rows."""

from __future__ import annotations

from enum import StrEnum


class Command(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    CONCURRENCY = "concurrency"    # arg: the new limit
    CANCEL_AGENT = "cancel_agent"  # arg: the task's seq
    KEY_RETIRE = "key_retire"      # arg: a key fingerprint
    KEY_ENABLE = "key_enable"      # arg: a key fingerprint
