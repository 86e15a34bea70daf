"""The engine holds heads only; prompts come back from the run's rows just before a send
(store/task_bodies.py), so a 100,000-task run never has every prompt in memory."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from swarm_tui.core import events as ev
from swarm_tui.core.states import TaskState
from swarm_tui.store.claims import take_lock
from swarm_tui.store.db import open_db
from swarm_tui.store.runs import create_run
from swarm_tui.store.task_bodies import BLOCK, KEEP_BEHIND, StoredBodies
from tests.conftest import make_client, make_runner, tasks


async def _stored(path: Path, run_id: str, work, runner) -> None:
    conn = await open_db(path)
    try:
        await create_run(conn, run_id, runner.records, work, name=None, simulated=True,
                         config={}, claim=take_lock(path, run_id))
    finally:
        await conn.close()


async def test_prompts_come_back_whole_a_block_at_a_time_and_the_cache_stays_bounded(
        sim_factory, tmp_path):
    n = BLOCK * 8 + 17
    work = tasks(n, prefix="b")
    path = tmp_path / "runs.db"
    gw = make_client(sim_factory(profile="fixed:5"))
    await _stored(path, "r", work, make_runner(gw, work))
    await gw.aclose()
    bodies = StoredBodies(path, "r")
    try:
        most = 0
        for seq, want in enumerate(work):
            got = bodies.ready(seq, seq) or await bodies.load(seq, seq)
            assert got == want
            most = max(most, len(bodies._cache))
        # one read per block (the read-ahead included), never the whole workload held
        assert bodies.reads <= n // BLOCK + 2
        assert most <= (KEEP_BEHIND + 2) * BLOCK
        assert len(bodies._blocks) <= KEEP_BEHIND + 2  # finished reads let go of too
        # a task parked long after its block was let go of is read alone
        assert bodies.ready(3, 3) is None
        before = bodies.reads
        assert await bodies.load(3, 3) == work[3]
        assert bodies.reads == before + 1
        with pytest.raises(LookupError, match="no task #"):
            await bodies.load(n + 5, n + 5)
    finally:
        await bodies.aclose()


@pytest.mark.slow
async def test_a_run_on_heads_sends_every_stored_prompt_and_an_unreadable_one_waits_for_resume(
        sim_factory, tmp_path):
    """The runner gets heads only (no prompt in memory): every task is sent with its stored
    prompt; one whose row is gone is left cancelled (resumable), never failed or sent."""
    server = sim_factory(profile="fixed:10")
    work = tasks(600, prefix="h")
    path = tmp_path / "runs.db"
    gw = make_client(server)
    await _stored(path, "h", work, make_runner(gw, work))
    gone = 300
    with sqlite3.connect(path) as raw:
        raw.execute("DELETE FROM tasks WHERE run_id='h' AND seq=?", (gone,))
    bodies = StoredBodies(path, "h")
    runner = make_runner(gw, [t.head() for t in work], concurrency=40, bodies=bodies)
    assert all(a.body is None for a in runner.records)
    sent: list[str] = []
    runner.consumers.append(lambda e: e.kind == ev.FIRST_TOKEN and e.record is not None
                            and e.record.body is not None
                            and sent.append(e.record.body.prompt))
    try:
        await runner.run()
    finally:
        await bodies.aclose()
        await gw.aclose()
    states = [a.state for a in runner.records]
    assert states.count(TaskState.SUCCEEDED) == 599
    assert runner.records[gone].state == TaskState.CANCELLED
    assert "prompt unreadable" in (runner.records[gone].error_message or "")
    assert sorted(sent) == sorted(t.prompt for i, t in enumerate(work) if i != gone)
    assert server.app.stats["requests"] == 599
    assert all(a.body is None for a in runner.records)  # let go of once answered
