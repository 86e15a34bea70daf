"""A gateway whose every key is refused pages at once (the engine on the simulator: a
socket, so functional; the alert rules themselves are tests/unit/test_alerts.py's)."""

from __future__ import annotations

import asyncio

from swarm_tui.ops.alerts import Alert, AlertWatch
from swarm_tui.settings.run_sections import AlertKind, AlertsConfig
from swarm_tui.settings.sections import SlaConfig
from swarm_tui.workload import Task
from tests.conftest import client_for, make_runner

CFG = AlertsConfig(sla_sustain=30, sla_window=10, sla_min_calls=20)


async def test_a_gateway_whose_every_key_is_rejected_pages_at_once(sim_factory):
    good, bad = "sk-good-" + "a" * 24, "sk-revoked-" + "z" * 24
    sim = sim_factory(profile="fixed:20", keys=[good])
    sent: list[Alert] = []
    async with client_for(sim, keys=[bad]) as gw:
        watch = AlertWatch(CFG, SlaConfig(), "run-1", sent.append)
        runner = make_runner(gw, [Task(id=f"t{i}", prompt="hi") for i in range(20)],
                             concurrency=2, consumers=[watch.on_event])
        run = asyncio.create_task(runner.run())
        try:
            for _ in range(600):  # the 401 disables the only key: waits, visibly (state)
                watch.tick(runner)
                if sent:
                    break
                await asyncio.sleep(0.02)
        finally:
            runner.cancel()
            await asyncio.wait_for(run, 30)
    assert [a.kind for a in sent] == [AlertKind.KEYS_EXHAUSTED]
    assert sent[0].summary == "gateway sim: no usable API key (1 disabled)"
    assert bad not in repr(sent[0])  # fingerprints at most, never the key
