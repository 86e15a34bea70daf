"""The one way this program runs a coroutine to the end: on uvloop where it is installed."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on uvloop where available: less loop overhead per call on 2 cores."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def run_brief(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run for a command that makes a few queries and ends (`runs`, `report`,
    `keys list`): uvloop's per-call saving never pays back its import there (issue 34)."""
    return asyncio.run(coro)
