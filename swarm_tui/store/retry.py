"""Reading again while the store fails for a moment (a PostgreSQL server restarting: its
errors reach us as sqlite3's, store/pg.py)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def retrying(read: Callable[[], Awaitable[T]], grace_s: float) -> T:
    """`read()` again while the store fails (a server restarting), for up to `grace_s`."""
    deadline = time.monotonic() + grace_s
    wait = 0.25
    while True:
        try:
            return await read()
        except sqlite3.Error:
            if time.monotonic() + wait > deadline:
                raise
            await asyncio.sleep(wait)
            wait = min(wait * 2, 4.0)

