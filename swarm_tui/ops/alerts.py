"""What deserves an on-call page, decided from the run's state — never from log text.

`AlertWatch` is an engine-event consumer (per call it bumps a counter of the current
second) and is ticked once a second on the engine's loop, where it reads the runner's
budget and key state; the canary controller tells it about stage changes. Each condition
alerts once per episode and re-arms when it clears. Delivery is `webhooks.py`'s job.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from swarm_tui.canary import state as cs
from swarm_tui.core import events as ev
from swarm_tui.core.states import AttemptOutcome, KeyState, TaskState
from swarm_tui.engine.looplag import LoopLag
from swarm_tui.engine.runner import BUDGET_STOPPED
from swarm_tui.engine.snapshot import key_rows
from swarm_tui.settings.run_sections import AlertKind, AlertsConfig
from swarm_tui.settings.sections import SlaConfig

if TYPE_CHECKING:
    from swarm_tui.engine.runner import SwarmRunner

SEVERITY = {
    AlertKind.CANARY_ABORT: "critical", AlertKind.SLA_BREACH: "critical",
    AlertKind.KEYS_EXHAUSTED: "critical", AlertKind.RUN_FAILED: "critical",
    AlertKind.BUDGET_STOP: "warning", AlertKind.BUDGET_80: "warning",
    AlertKind.CANARY_PAUSE: "warning", AlertKind.RUN_INTERRUPTED: "warning",
    AlertKind.CANARY_PROMOTE: "info", AlertKind.RUN_FINISHED: "info",
}
# every key of a gateway unusable this long pages (a 4 s Retry-After on a one-key gateway
# is routine); all of them disabled or retired pages at once: nothing brings them back
KEYS_SUSTAIN_S = 30.0


@dataclass(frozen=True)
class Alert:
    kind: AlertKind
    summary: str
    run_id: str
    at: float = field(default_factory=time.time)
    details: dict[str, Any] = field(default_factory=dict)
    # a condition that cleared: the pager closes the incident this alert's `key` opened
    resolved: bool = False
    scope: str = ""  # what else tells one condition from another (a gateway)
    started_at: float | None = None  # for a resolve: when the condition was first paged

    @property
    def severity(self) -> str:
        return SEVERITY[self.kind]

    @property
    def replay(self) -> str:
        """The command that opens the console at this alert's moment (pasted from a page).
        A resolve opens the moment the condition was first paged."""
        from swarm_tui.core.moments import replay_command

        return replay_command(self.run_id, self.started_at or self.at)

    def link(self, console_url: str | None) -> str | None:
        """The same moment in the served console (`alerts.console_url`), if one is set."""
        if console_url is None:
            return None
        from swarm_tui.core.moments import moment_link

        return moment_link(console_url, self.run_id, self.started_at or self.at)

    @property
    def key(self) -> str:
        """The same for a condition's trigger and its resolve (PagerDuty's dedup_key,
        Alertmanager's label set): one incident per run, condition and scope."""
        return f"swarm-tui/{self.run_id}/{self.kind}" + (f"/{self.scope}" if self.scope else "")


# conditions that clear (and are resolved when they do, or when the run ends)
CLEARING = frozenset({AlertKind.SLA_BREACH, AlertKind.KEYS_EXHAUSTED})


def canary_alert(old: cs.CanaryState, new: cs.CanaryState) -> tuple[AlertKind, str] | None:
    """The alert a canary stage change raises, if any."""
    name = f"canary {new.name} ({new.baseline} → {new.candidate})"
    if new.status == cs.ABORTED and old.status != cs.ABORTED:
        return AlertKind.CANARY_ABORT, f"{name} aborted at {old.pct}%: all traffic on " \
            f"{new.baseline}"
    if new.status == cs.PAUSED and old.status != cs.PAUSED:
        return AlertKind.CANARY_PAUSE, f"{name} paused at {new.pct}%"
    if new.pct > old.pct:
        return AlertKind.CANARY_PROMOTE, f"{name} promoted {old.pct}% → {new.pct}%"
    return None


class _Window:
    """Per-second counts over a rolling window: calls ok / failed / ok but slower than the
    SLA's p95, tasks succeeded / failed. p95 > the SLA ⇔ more than 5 % of successful calls
    are slower than it, so no percentile is computed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = max(1, int(seconds))
        self.slots: deque[list[int]] = deque()  # [second, ok, failed, slow, t_ok, t_failed]

    def _slot(self, now: float) -> list[int]:
        sec = int(now)
        if not self.slots or self.slots[-1][0] != sec:
            self.slots.append([sec, 0, 0, 0, 0, 0])
            while self.slots[0][0] <= sec - self.seconds:
                self.slots.popleft()
        return self.slots[-1]

    def add(self, now: float, column: int) -> None:
        self._slot(now)[column] += 1

    def totals(self, now: float) -> list[int]:
        self._slot(now)
        out = [0] * 5
        for s in self.slots:
            for i in range(5):
                out[i] += s[i + 1]
        return out


OK, FAILED, SLOW, T_OK, T_FAILED = range(1, 6)


class AlertWatch:
    def __init__(self, cfg: AlertsConfig, sla: SlaConfig, run_id: str,
                 send: Callable[[Alert], None], clock: Callable[[], float] = time.monotonic,
                 *, run_level: bool = True) -> None:
        # run_level False: one of a run's workers — the run's budget is paged once, by the
        # worker whose draw crossed 80 % and the one that stopped the run at the cap
        self.run_level = run_level
        self.cfg = cfg
        self.sla = sla
        self.run_id = run_id
        self.send = send
        self.clock = clock
        self.window = _Window(cfg.sla_window)
        self._breach_since: float | None = None
        self._breach_alerted = False
        self._budget_warned = False
        self._budget_stopped = False
        self._cap_passed = False
        self._keys_bad_since: dict[str, float] = {}
        self._keys_alerted: set[str] = set()
        self._open: dict[str, Alert] = {}  # paged conditions not yet cleared, by key

    def alert(self, kind: AlertKind, summary: str, **details: Any) -> None:
        self.alert_scoped(kind, summary, "", **details)

    def alert_scoped(self, kind: AlertKind, summary: str, scope: str, **details: Any) -> None:
        a = Alert(kind, summary, self.run_id, details=details, scope=scope)
        if kind in CLEARING:
            self._open[a.key] = a
        self.send(a)

    def resolve(self, kind: AlertKind, summary: str, scope: str = "") -> None:
        """The condition paged under (kind, scope) has cleared: its resolve, once."""
        key = Alert(kind, "", self.run_id, scope=scope).key
        opened = self._open.pop(key, None)
        if opened is not None:
            self.send(Alert(kind, summary, self.run_id, details=opened.details, resolved=True,
                            scope=scope, started_at=opened.at))

    def resolve_all(self, why: str) -> None:
        """The run ended: every condition still open is resolved (an incident left open
        for a run that is over pages nobody usefully)."""
        for opened in list(self._open.values()):
            self.resolve(opened.kind, f"{why}: {opened.summary}", opened.scope)

    # -- engine events ------------------------------------------------------------------
    def on_event(self, e: ev.Event) -> None:
        kind = e.kind
        if kind in ev.FINAL_KINDS or kind == ev.RETRY_SCHEDULED:
            now = self.clock()
            x = e.attempt
            if x is not None:
                if x.outcome == AttemptOutcome.OK:
                    self.window.add(now, OK)
                    if x.latency_ms is not None and x.latency_ms > self.sla.p95_ms:
                        self.window.add(now, SLOW)
                elif x.outcome == AttemptOutcome.ERROR:
                    self.window.add(now, FAILED)
            if kind == ev.SUCCEEDED:
                self.window.add(now, T_OK)
            elif kind == ev.FAILED:
                self.window.add(now, T_FAILED)

    def on_canary_change(self, old: cs.CanaryState, new: cs.CanaryState) -> None:
        found = canary_alert(old, new)
        if found is not None:
            self.alert(found[0], found[1], pct=new.pct, status=new.status,
                       baseline=new.baseline, candidate=new.candidate)

    # -- once a second ------------------------------------------------------------------
    def tick(self, runner: SwarmRunner) -> None:
        self._budget(runner)
        self._keys(runner)
        self._sla(runner.loop_lag)

    def _budget(self, runner: SwarmRunner) -> None:
        cap = runner.policy.budget_usd
        if cap is None or not self.run_level:
            return
        if runner.budget_warned and not self._budget_warned:
            self._budget_warned = True
            self.alert(AlertKind.BUDGET_80, f"budget 80% reached: ${runner.spent_usd:.4f} "
                       f"spent of ${cap:.4f}", spent_usd=runner.spent_usd, cap_usd=cap)
        if runner.cap_passed and not self._cap_passed:
            self._cap_passed = True
            self.alert(AlertKind.BUDGET_STOP, f"budget cap ${cap:.4f} PASSED: "
                       f"${runner.spent_usd:.4f} spent (+${runner.spent_usd - cap:.4f}); "
                       "the gateway billed past a call's ceiling", spent_usd=runner.spent_usd,
                       cap_usd=cap, passed_by_usd=runner.spent_usd - cap)
        if runner.stop_reason == BUDGET_STOPPED and not self._budget_stopped:
            self._budget_stopped = True
            unsent = sum(1 for a in runner.records if a.state == TaskState.QUEUED)
            self.alert(AlertKind.BUDGET_STOP, f"budget cap ${cap:.4f} reached: dispatch "
                       f"stopped, {unsent} tasks unsent (resumable)", spent_usd=runner.spent_usd,
                       cap_usd=cap, unsent=unsent)

    def _keys(self, runner: SwarmRunner) -> None:
        now = self.clock()
        by_gateway: dict[str, list[str]] = {}
        for row in key_rows(runner.gateways):
            by_gateway.setdefault(row.gateway, []).append(row.state)
        for gw, states in by_gateway.items():
            if KeyState.ACTIVE in states:
                self._keys_bad_since.pop(gw, None)
                if gw in self._keys_alerted:
                    self._keys_alerted.discard(gw)
                    self.resolve(AlertKind.KEYS_EXHAUSTED, f"gateway {gw}: a usable API key "
                                 "again", scope=gw)
                continue
            since = self._keys_bad_since.setdefault(gw, now)
            final = all(s in (KeyState.DISABLED, KeyState.RETIRED) for s in states)
            if gw not in self._keys_alerted and (final or now - since >= KEYS_SUSTAIN_S):
                self._keys_alerted.add(gw)
                counts = {s: states.count(s) for s in sorted(set(states))}
                self.alert_scoped(AlertKind.KEYS_EXHAUSTED, f"gateway {gw}: no usable API "
                                  "key (" + ", ".join(f"{n} {s}" for s, n in counts.items())
                                  + ")", gw, gateway=gw, keys=counts)

    def _sla(self, lag: LoopLag) -> None:
        now = self.clock()
        ok, failed, slow, t_ok, t_failed = self.window.totals(now)
        reasons = []
        calls = ok + failed
        if calls >= self.cfg.sla_min_calls:
            if self.sla.success_basis == "call":
                rate, basis = ok / calls, "call"
            else:
                tasks = t_ok + t_failed
                rate, basis = (t_ok / tasks if tasks else 1.0), "task"
            if rate < self.sla.min_success:
                reasons.append(f"{basis} success {rate:.2%} < {self.sla.min_success:.2%}")
            # latency judged only when the figures are the gateway's (not client-bound)
            if ok and slow / ok > 0.05 and not lag.client_bound():
                reasons.append(f"p95 > {self.sla.p95_ms:.0f} ms ({slow / ok:.1%} of calls "
                               "slower)")
        if not reasons:
            self._breach_since = None
            if self._breach_alerted:
                self._breach_alerted = False
                self.resolve(AlertKind.SLA_BREACH, f"SLA met again over the last "
                             f"{self.window.seconds} s")
            return
        if self._breach_since is None:
            self._breach_since = now
        if not self._breach_alerted and now - self._breach_since >= self.cfg.sla_sustain:
            self._breach_alerted = True
            self.alert(AlertKind.SLA_BREACH, f"SLA breached for {now - self._breach_since:.0f}"
                       f" s over the last {self.window.seconds} s: " + "; ".join(reasons),
                       calls=calls)
