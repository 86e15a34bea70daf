"""Ending a task this code started (swarm_tui/aio.py `cancel_and_wait`), and that every
stop path ends its tasks that way."""

from __future__ import annotations

import ast
import asyncio
import contextlib
from pathlib import Path

import pytest

from swarm_tui.aio import cancel_and_wait

ROOT = Path(__file__).resolve().parents[2] / "swarm_tui"


def _slow_to_end(cleaning: asyncio.Event, may_end: asyncio.Event) -> asyncio.Task[None]:
    """A task whose cleanup, once cancelled, waits for `may_end` (a writer's last flush)."""
    async def body() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaning.set()
            await may_end.wait()
    return asyncio.create_task(body())


async def test_the_waiter_cancelled_during_the_wait_is_cancelled_not_carried_on():
    cleaning, may_end, carried_on = asyncio.Event(), asyncio.Event(), []
    child = _slow_to_end(cleaning, may_end)
    await asyncio.sleep(0)  # the child is waiting

    async def stop() -> None:
        await cancel_and_wait(child)
        carried_on.append(True)  # with suppress(CancelledError) around the wait: reached

    stopper = asyncio.create_task(stop())
    await cleaning.wait()  # the stop is waiting on the child's cleanup
    stopper.cancel()
    may_end.set()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert carried_on == [] and child.cancelled()


async def test_a_timeout_around_a_stop_fires():
    cleaning, may_end = asyncio.Event(), asyncio.Event()
    child = _slow_to_end(cleaning, may_end)
    await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as deadline:
            async def due_once_cleaning() -> None:  # the deadline passes during the wait
                await cleaning.wait()
                deadline.reschedule(asyncio.get_running_loop().time())
            trigger = asyncio.create_task(due_once_cleaning())
            await cancel_and_wait(child)
    assert trigger.done()
    assert child.cancelled()


async def test_cleanup_after_a_caught_cancellation_still_waits_for_its_tasks():
    """A task that caught its own cancellation earlier and now cleans up (a run's end after
    ^C) ends its children and goes on: that older cancellation is not raised again."""
    ended = []

    async def child() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append("child")

    async def owner() -> str:
        task = asyncio.create_task(child())
        with contextlib.suppress(asyncio.CancelledError):  # handled: its cleanup follows
            await asyncio.Event().wait()
        await cancel_and_wait(task)
        return "cleaned up"

    t = asyncio.create_task(owner())
    await asyncio.sleep(0)
    t.cancel()
    assert await t == "cleaned up" and ended == ["child"]


async def test_a_child_that_failed_raises_its_error():
    async def boom() -> None:
        raise ValueError("lost")

    task = asyncio.create_task(boom())
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="lost"):
        await cancel_and_wait(task)


def _swallowing_waits(tree: ast.AST) -> list[int]:
    """`with suppress(..., CancelledError, ...)` whose body awaits: the pattern that
    cannot tell the child's cancellation from the waiter's own."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.With | ast.AsyncWith):
            continue
        for item in node.items:
            call = item.context_expr
            if (isinstance(call, ast.Call) and ast.unparse(call.func).endswith("suppress")
                    and any(ast.unparse(a).endswith("CancelledError") for a in call.args)
                    and any(isinstance(n, ast.Await) for b in node.body for n in ast.walk(b))):
                found.append(node.lineno)
    return found


def test_no_stop_path_swallows_its_own_cancellation():
    offenders = {str(p.relative_to(ROOT)): lines for p in sorted(ROOT.rglob("*.py"))
                 if (lines := _swallowing_waits(ast.parse(p.read_text("utf-8"))))}
    assert offenders == {}, "end tasks with swarm_tui.aio.cancel_and_wait"


def test_the_check_finds_the_pattern():
    src = ("async def stop(t):\n    t.cancel()\n"
           "    with contextlib.suppress(asyncio.CancelledError):\n        await t\n")
    assert _swallowing_waits(ast.parse(src)) == [3]
