"""The ways this program runs a coroutine to its end: on uvloop where it is installed, on
plain asyncio for a few queries, and on no loop at all for a store on this thread; and how
it ends a task it started."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on uvloop where available: less loop overhead per call on 2 cores."""
    import asyncio

    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def run_brief(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run for a command that makes a few queries and ends on a server's store:
    uvloop's per-call saving never pays back its import there (issue 34)."""
    import asyncio

    return asyncio.run(coro)


class NeedsLoop(RuntimeError):
    """A coroutine given to run_here waited on something only an event loop can finish."""


def run_here(coro: Coroutine[Any, Any, T]) -> T:
    """Run to its end a coroutine that never waits — a SQLite file's statements on this
    thread (store/direct.py) — with no event loop: importing asyncio (and the ssl,
    sockets and threads it brings) is ~4× `python -c pass` on its own, more than all the
    queries of `runs` or `report last` (issue 34). An exception raised inside unwinds the
    coroutine's `finally` blocks as on a loop; a coroutine that does wait is closed (its
    `finally` blocks run) and NeedsLoop raised — a bug the brief commands' tests catch."""
    try:
        waited_on = coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise NeedsLoop(f"{getattr(coro, '__qualname__', coro)} waited on {waited_on!r}")


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel a task this code started and wait until it has ended. A cancellation of the
    waiting task itself goes on up: `suppress(CancelledError)` around the wait cannot tell
    the child's from its own, and swallowing its own leaves whoever cancelled it — an
    `asyncio.timeout`, a run's end — waiting on code that no longer knows it should stop.
    Any other exception the child ended with is raised here, as `await task` would."""
    import asyncio

    me = asyncio.current_task()
    # counted before: a cancellation of this task that was caught earlier and handled
    # (cleanup that calls this) is not one that arrived during this wait
    before = me.cancelling() if me is not None else 0
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        if me is not None and me.cancelling() > before:
            raise
