"""The engine on its own thread and event loop, and the only ways to reach it from the
console's loop: `call` (fire and forget), `submit` (a coroutine, awaited for its result)
and `stop` (issue 33: these were threads, events, flags and loop checks spelt out in each
method of the live source).

Why a thread of its own: measured, on the console's loop a wave of 1,000 calls ending
together held key presses up to a second; on its own loop the GIL hands the UI a turn
every few ms.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class EngineGone(Exception):
    """The engine's loop has ended (the run is over): nothing reaches it any more."""


class EngineHost:
    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._done = threading.Event()

    async def run(self, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `main()` on the engine's thread until it returns; awaitable from the UI."""
        await asyncio.to_thread(self._thread, main)

    def _thread(self, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
        from swarm_tui.aio import run_async

        async def hosted() -> None:
            self.loop = asyncio.get_running_loop()
            await main()

        try:
            run_async(hosted())
        finally:
            self._done.set()

    @property
    def started(self) -> bool:
        return self.loop is not None

    def _live_loop(self) -> asyncio.AbstractEventLoop | None:
        loop = self.loop
        if loop is None or loop.is_closed() or self._done.is_set():
            return None
        return loop

    @property
    def alive(self) -> bool:
        return self._live_loop() is not None

    def call(self, fn: Callable[..., object], *args: object) -> bool:
        """`fn(*args)` on the engine's loop, soon; False once the engine has ended."""
        loop = self._live_loop()
        if loop is None:
            return False
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # closed between the check and the call: the run is over
            return False
        return True

    async def submit(self, coro: Coroutine[Any, Any, T]) -> T:
        """`coro` on the engine's loop, its result (or exception) here."""
        loop = self._live_loop()
        if loop is None:
            coro.close()
            raise EngineGone
        try:
            fut = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:
            coro.close()
            raise EngineGone from None
        return await asyncio.wrap_future(fut)

    async def wait(self, timeout_s: float) -> bool:
        """Until the engine's thread has ended (True), or `timeout_s` passed."""
        if self.loop is None:
            return True
        return await asyncio.to_thread(self._done.wait, timeout_s)
