"""When an alert fires: sustained SLA breaches (a clock the test moves), a gateway with no
usable key (a real run on the simulator), canary stage changes."""

from __future__ import annotations

from swarm_tui.canary import state as cs
from swarm_tui.core import events as ev
from swarm_tui.core.records import Attempt, TaskRecord
from swarm_tui.engine.looplag import LoopLag
from swarm_tui.ops.alerts import Alert, AlertWatch, canary_alert
from swarm_tui.settings.run_sections import AlertKind, AlertsConfig
from swarm_tui.settings.sections import SlaConfig
from swarm_tui.workload import Task

CFG = AlertsConfig(sla_sustain=30, sla_window=10, sla_min_calls=20)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _call(ok: bool, latency_ms: float = 100.0) -> ev.Event:
    agent = TaskRecord(0, 0, Task(id="t", prompt="p"), "m", "gw", "baseline", [], [])
    x = Attempt(1, "m", "gw", "fp", 0.0, 0.0, latency_ms=latency_ms if ok else None,
                outcome="ok" if ok else "error", error_class=None if ok else "server")
    return ev.Event(ev.SUCCEEDED if ok else ev.RETRY_SCHEDULED, 0.0, agent, x)


def _second(watch: AlertWatch, clock: Clock, calls: list[ev.Event]) -> None:
    for e in calls:
        watch.on_event(e)
    watch._sla(LoopLag())  # the SLA part of the once-a-second tick (no runner needed)
    clock.t += 1.0


def test_a_breach_pages_once_when_it_has_lasted_and_again_only_after_it_cleared():
    clock, sent = Clock(), []
    watch = AlertWatch(CFG, SlaConfig(), "run-1", sent.append, clock=clock)
    bad = [_call(True)] * 18 + [_call(False)] * 2  # 90 % per call: below 99 %
    good = [_call(True)] * 20
    for _ in range(29):
        _second(watch, clock, bad)
    assert sent == []  # 29 s of breach: not yet
    for _ in range(10):
        _second(watch, clock, bad)
    assert [a.kind for a in sent] == [AlertKind.SLA_BREACH]  # once, not once a second
    assert "call success 90.00% < 99.00%" in sent[0].summary
    for _ in range(12):  # the window clears: the incident is resolved, under its key
        _second(watch, clock, good)
    assert [(a.kind, a.resolved) for a in sent] == [(AlertKind.SLA_BREACH, False),
                                                    (AlertKind.SLA_BREACH, True)]
    assert sent[1].key == sent[0].key and sent[1].started_at == sent[0].at
    for _ in range(35):  # the window turns bad in its 2nd second, then 30 s of breach
        _second(watch, clock, bad)
    assert [a.resolved for a in sent] == [False, True, False]
    watch.resolve_all("run finished")  # what is still open when the run ends
    assert [a.resolved for a in sent] == [False, True, False, True]


def test_one_bad_interval_and_thin_traffic_never_page():
    clock, sent = Clock(), []
    watch = AlertWatch(CFG, SlaConfig(), "run-1", sent.append, clock=clock)
    for i in range(120):
        bad_now = i % 40 < 15  # 15 s bad in every 40: never 30 s in a row
        _second(watch, clock, [_call(True)] * 18 + [_call(False)] * 2 if bad_now
                else [_call(True)] * 40)
    thin = AlertWatch(CFG, SlaConfig(), "run-2", sent.append, clock=clock)
    for _ in range(60):  # 1 call a second, all failing: under sla_min_calls in the window
        _second(thin, clock, [_call(False)])
    assert sent == []


def test_slow_calls_page_on_latency_and_the_task_basis_is_honoured():
    clock, sent = Clock(), []
    watch = AlertWatch(CFG, SlaConfig(p95_ms=350), "run-1", sent.append, clock=clock)
    for _ in range(31):  # 10 % of calls over 350 ms: p95 over the SLA
        _second(watch, clock, [_call(True, 100.0)] * 18 + [_call(True, 500.0)] * 2)
    assert len(sent) == 1 and "p95 > 350 ms (10.0% of calls slower)" in sent[0].summary
    tasks = AlertWatch(CFG, SlaConfig(success_basis="task"), "run-2", sent.append,
                       clock=clock)
    for _ in range(40):  # failing calls that retries turn into succeeded tasks
        _second(tasks, clock, [_call(True)] * 18 + [_call(False)] * 2)
    assert len(sent) == 1


def test_canary_moves_map_to_their_alerts():
    s = cs.CanaryState("c", "direct", "gw", cs.PROGRESSING, 5, 0, 0)
    promoted = cs.CanaryState("c", "direct", "gw", cs.PROGRESSING, 25, 0, 0)
    aborted = cs.CanaryState("c", "direct", "gw", cs.ABORTED, 0, 0, 0)
    paused = cs.CanaryState("c", "direct", "gw", cs.PAUSED, 25, 0, 0)
    assert canary_alert(s, promoted)[0] == AlertKind.CANARY_PROMOTE
    assert canary_alert(promoted, aborted) == (
        AlertKind.CANARY_ABORT, "canary c (direct → gw) aborted at 25%: all traffic on direct")
    assert canary_alert(promoted, paused)[0] == AlertKind.CANARY_PAUSE
    assert canary_alert(paused, paused) is None
    assert Alert(AlertKind.CANARY_ABORT, "x", "r").severity == "critical"
