"""PostgreSQL's LISTEN/NOTIFY wakes readers (issue 17): a queued command reaches the run's
writer, a canary change reaches every process following it, and a watcher of a quiet run
skips its reads — each shown with the polls that would otherwise deliver it made too slow
to matter (an hour), so only the notification can have done it. Nothing here waits on
time: each waits on the state the notification brings."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from swarm_tui.canary import controller as canary_controller
from swarm_tui.engine.routing import CanaryRouter
from swarm_tui.run.control_poll import ControlPoll
from swarm_tui.run.recorder import RunRecorder
from swarm_tui.run_sources import StoreSource
from swarm_tui.settings.sections import CanaryConfig
from swarm_tui.store import writer as store_writer
from swarm_tui.store.claims import take_lock
from swarm_tui.store.control import queue_command
from swarm_tui.store.db import open_db
from swarm_tui.store.notify import ROWS, Listener, notify
from swarm_tui.store.runs import create_run
from swarm_tui.store.writer import StoreWriter
from tests.conftest import make_client, make_runner, new_pg_database, tasks, until

HOUR = 3600.0


@pytest.fixture
def pg(pg_server):
    return new_pg_database(pg_server)


async def test_a_notification_is_heard_once_committed_and_never_when_rolled_back(pg):
    conn = await open_db(pg)
    heard: list[tuple[str, str]] = []
    listener = await Listener.open(pg, (ROWS,), lambda c, k: heard.append((c, k)))
    assert listener is not None
    try:
        await conn.execute("BEGIN")
        await notify(conn, ROWS, "rolled-back")
        await conn.execute("ROLLBACK")
        await conn.execute("BEGIN")
        await notify(conn, ROWS, "r1")
        assert not listener.take(ROWS, "r1")  # not before its commit
        await conn.execute("COMMIT")
        await until(lambda: heard)
        assert heard == [(ROWS, "r1")]  # the rolled-back one never came
        assert listener.take(ROWS, "r1") and not listener.take(ROWS, "r1")  # taken once
    finally:
        await listener.close()
        await conn.close()
    assert await Listener.open(Path("runs.db"), (ROWS,)) is None  # SQLite: readers poll


@pytest.mark.slow
async def test_a_queued_pause_reaches_the_writer_by_notification(pg, sim_factory,
                                                                 monkeypatch):
    monkeypatch.setattr(store_writer, "CONTROL_POLL_S", HOUR)
    conn = await open_db(pg)
    other = await open_db(pg, create=False)
    gw = make_client(sim_factory(profile="fixed:50"))
    work = tasks(400, prefix="n")
    runner = make_runner(gw, work, concurrency=10)
    claim = take_lock(pg, "n")
    try:
        await create_run(conn, "n", runner.records, work, name=None, simulated=True,
                         config={}, claim=claim)
        writer = StoreWriter(conn, pg, "n", runner, claim=claim)
        ControlPoll(RunRecorder(writer, runner))  # as the run's lifecycle attaches them
        writer.start()
        paused_seen: list[int] = []

        async def operator() -> None:
            await until(lambda: runner.counts["succeeded"] >= 20)
            await queue_command(other, "n", "pause", None)
            await until(lambda: runner.paused)
            paused_seen.append(runner.counts["succeeded"])
            await queue_command(other, "n", "resume", None)
            await until(lambda: not runner.paused)

        op = asyncio.create_task(operator())
        await runner.run()
        await op
        await writer.close("finished")
    finally:
        claim.release()
        await gw.aclose()
        await other.close()
        await conn.close()
    assert paused_seen and runner.counts["succeeded"] == 400


async def test_a_canary_change_reaches_a_following_process_by_notification(pg, monkeypatch):
    monkeypatch.setattr(canary_controller, "POLL_S", HOUR)
    cfg = CanaryConfig(baseline="b", candidate="c", interval=HOUR)
    router = CanaryRouter("b", "c")
    ctl = canary_controller.CanaryController(cfg, router, pg)
    await ctl.open()
    try:
        assert router.pct == 5
        ctl.start()
        await canary_controller.act_stored(pg, cfg, "set", "100", "move everyone", "cli")
        await until(lambda: router.pct == 100)
    finally:
        await ctl.close()


async def test_the_first_look_evaluates_however_briefly_the_host_has_been_up(tmp_path,
                                                                           monkeypatch):
    """Monotonic time starts near 0 when a host boots. A controller that counted its last
    evaluation from 0.0 skipped every evaluation until the host had been up `interval`
    seconds: on a CI runner booted a minute before, a canary with a one-hour interval was
    never judged (the suite caught it on a fresh machine). An interval longer than this
    host's uptime stands in for that host here, whatever this one's uptime is."""
    monkeypatch.setattr(canary_controller, "POLL_S", HOUR)
    longer_than_up = time.monotonic() + HOUR
    cfg = CanaryConfig(baseline="b", candidate="c", interval=longer_than_up)
    ctl = canary_controller.CanaryController(cfg, CanaryRouter("b", "c"), tmp_path / "runs.db")
    await ctl.open()
    try:
        ctl.start()
        await until(lambda: ctl.view is not None, timeout=30)
        assert ctl.view is not None and ctl.view.state.pct == 5
    finally:
        async with asyncio.timeout(10):
            await ctl.close()


async def test_a_notification_as_the_canary_loop_stops_does_not_hang_the_stop(tmp_path,
                                                                            monkeypatch):
    """A canary move notified just as the run stops: the loop's wait ends and it is
    cancelled in the same turn. With asyncio.wait_for (Python 3.11) the cancel was
    swallowed, the loop went on to wait for the lock stop() holds, and the run's end hung
    forever (the suite caught it on a loaded machine). Here the two meet on purpose."""
    monkeypatch.setattr(canary_controller, "POLL_S", HOUR)
    cfg = CanaryConfig(baseline="b", candidate="c", interval=HOUR)
    ctl = canary_controller.CanaryController(cfg, CanaryRouter("b", "c"), tmp_path / "runs.db")
    await ctl.open()
    try:
        ctl.start()
        # its first look done: from setting the view to its wait nothing awaits, so it waits
        await until(lambda: ctl.view is not None)
        ctl.look_now()  # the notification, and in the same turn the stop
        async with asyncio.timeout(30) as deadline:  # (a hang's net, not a speed bound)
            await ctl.stop()
        # (stop() ends a cancelled wait quietly: the net firing is told by its state)
        assert not deadline.expired(), "stop() hung until the test's deadline"
    finally:
        async with asyncio.timeout(10):
            await ctl.close()


async def test_a_watcher_of_a_quiet_run_reads_nothing_until_told(pg, sim_factory):
    conn = await open_db(pg)
    gw = make_client(sim_factory(profile="fixed:50"))
    work = tasks(5, prefix="q")
    claim = take_lock(pg, "q")
    statements: list[str] = []
    src = StoreSource(pg, "q")
    try:
        await create_run(conn, "q", make_runner(gw, work).records, work, name=None,
                         simulated=True, config={}, claim=claim)
        await src.open()
        assert src.conn is not None
        await src.conn.set_trace_callback(statements.append)
        first = await src.snapshot()
        assert first is not None and src.active and statements  # the first tick reads
        statements.clear()
        again = await src.snapshot()
        assert again is not None and statements == []  # nothing was written: no reads
        await notify(conn, ROWS, "q")  # what a writer's flush says when it stores rows

        async def reads() -> bool:
            await src.snapshot()
            return bool(statements)

        async with asyncio.timeout(30):
            while not await reads():
                await asyncio.sleep(0.05)
    finally:
        await src.close()
        claim.release()
        await gw.aclose()
        await conn.close()
