"""Deterministic inputs for the console's visual (snapshot) tests.

Live runs are timing-dependent (latencies differ by a few ms each run), so the
pictures are taken of a fixed snapshot with the shape of a real mid-run swarm;
the console's behaviour is tested against real runs in test_ui.py.
"""

from __future__ import annotations

import dataclasses
import random

from swarm_tui.engine.snapshot import SlotCell, Snapshot, TaskCell
from swarm_tui.run_sources import TaskDetail
from swarm_tui.settings.sections import SlaConfig

STATES = ["succeeded"] * 55 + ["streaming"] * 20 + ["running"] * 8 + ["retrying"] * 4 + \
    ["failed"] * 2 + ["cancelled"] * 1 + ["queued"] * 50


def mid_run_snapshot(n: int = 140) -> Snapshot:
    rng = random.Random(4)
    cells = []
    for i in range(n):
        state = STATES[i % len(STATES)] if i < 90 else "queued"
        lat = round(150 + rng.random() * 200, 1) if state == "succeeded" else None
        cells.append(TaskCell(i, f"demo-{i:05d}", state,
                               "kimi-k2.5" if i % 7 == 0 else "deepseek-v3.2", "baseline",
                               lat, 0.00065 if lat else None, 2 if state == "retrying" else 1,
                               "rate_limited" if state in ("retrying", "failed") else None))
    # the agents view: 100 slots, the working cells in them (some slots idle between calls)
    working = [c for c in cells if c.state in ("running", "streaming")]
    slots = []
    for slot in range(100):
        cell = working[slot // 3] if slot % 3 != 2 and slot // 3 < len(working) else None
        slots.append(SlotCell(slot, cell, 1.8 - (slot % 9) * 0.17 if cell else None,
                              (slot * 97) % 2400 if cell and cell.state == "streaming" else
                              (0 if cell else None)))
    counts: dict[str, int] = {}
    for c in cells:
        counts[c.state] = counts.get(c.state, 0) + 1
    # four lines: they fit the log at 80x24 without scrolling, so no picture depends on
    # when the log's scroll to its newest line lands (under a CPU hog it once came after
    # the picture); following the newest line is tested on a live run in test_ui.py
    log = (*(f"{0.4 + i * 0.1:7.1f}s RETRY  demo-{i * 7:05d} #1 rate_limited 429 +1.00s"
             for i in range(3)), "    1.3s FAIL   demo-00044 auth 401 Incorrect API key")
    return Snapshot(
        run_id="20261202-093000-abcd", simulated=True, gateways=("sim",), status="running",
        elapsed_s=1.8, total=n, counts=counts, in_flight=32, concurrency=100, calls_per_s=412.0,
        success_rate=55 / 57, call_success_rate=55 / 64, calls=64,
        latency_ms=(182.0, 281.0, 402.0), ttft_ms=(64.0, 99.0),
        tokens_in=39_600, tokens_out=66_000, cost_usd=0.0358, unpriced_tasks=0,
        usage_estimated=False, projected_month_usd=234.0, sla=SlaConfig(), cells=tuple(cells),
        slots=tuple(slots),
        log=log, histogram=(0, 0, 4, 20, 18, 9, 3, 1, 0, 0, 0, 0),
        sparkline=(0,) * 50 + (40, 180, 390, 412, 405, 398, 420, 415, 410, 412),
    )


def agent_detail() -> TaskDetail:
    return TaskDetail(
        seq=7, task_id="demo-00007", state="succeeded", model="kimi-k2.5", gateway="sim",
        bucket="baseline", key_fp="sk-…a1b2#3f9c1e", prompt="Task 7: summarise the contract " * 4,
        latency_ms=214.0, ttft_ms=71.0, queue_ms=1012.0, tokens_in=1210, tokens_out=1150,
        cost_usd=0.003057, error=None, response_text="The contract renews yearly. " * 6,
        attempts=[
            {"number": 1, "model": "kimi-k2.5", "key_fp": "sk-…a1b2#3f9c1e", "queue_ms": 10.0,
             "latency_ms": 8.0, "ttft_ms": None, "status_code": 429,
             "error_class": "rate_limited", "error_message": "Rate limit reached, retry later.",
             "retry_wait_s": 1.0, "outcome": "error"},
            {"number": 2, "model": "kimi-k2.5", "key_fp": "sk-…a1b2#3f9c1e", "queue_ms": 1002.0,
             "latency_ms": 214.0, "ttft_ms": 71.0, "status_code": None, "error_class": None,
             "error_message": None, "retry_wait_s": None, "outcome": "ok"},
        ])


class FixedSource:
    """Serves one fixed snapshot (for pictures); records control commands."""

    kind = "live"
    error = None
    at = None

    def __init__(self, snap: Snapshot, readonly: bool = False) -> None:
        self.snap = snap
        self.readonly = readonly
        self.active = True
        self.paused = False
        self.commands: list[tuple[str, str | None]] = []
        self.canary_view = None

    async def snapshot(self) -> Snapshot:
        return self.snap

    async def detail(self, seq: int) -> TaskDetail:
        return agent_detail()

    async def control(self, command: str, arg: str | None = None) -> bool:
        self.commands.append((command, arg))
        return True

    async def keys(self):
        return self.snap.keys, self.snap.waiting_for_keys

    async def start(self) -> None:
        return None

    async def cost(self):
        return None

    async def key_op(self, op: str, ref: str, secret: str | None = None,
                     label: str | None = None) -> str:
        self.commands.append((f"key_{op}", ref))
        return f"key {ref}: {op}"

    def canary_live(self):
        view = self.canary_view  # a test's live canary evaluation, if it sets one
        return (view.cfg, view) if view is not None else None

    async def canary_act(self, action: str, arg: str | None, reason: str | None) -> bool:
        return False

    async def shutdown(self) -> None:
        self.active = False


CANARY_NOW = 1_796_000_000.0


def canary_view():
    """A canary mid-analysis at 25 %: baked 1h of 24h, gates passing but cost inconclusive."""
    from swarm_tui.canary.analysis import Analysis, evaluate, figures
    from swarm_tui.canary.controller import CanaryView
    from swarm_tui.canary.state import CanaryState
    from swarm_tui.settings.sections import CanaryConfig
    from swarm_tui.store.canary import ActionRecord

    cfg = CanaryConfig(baseline="direct", candidate="gateway-b", mode="auto", min_samples=100)
    rows = [("baseline", "succeeded", 300.0 + (i * 37) % 450, 120.0 + (i * 13) % 90, 720, 1100,
             0.00068) for i in range(900)]
    rows += [("candidate", "succeeded", 150.0 + (i * 29) % 160, 60.0 + (i * 7) % 70, 715, 1098,
              None if i < 3 else 0.00067) for i in range(300)]
    calls = [("baseline", "ok", None)] * 880 + [("baseline", "error", "rate_limited")] * 20
    calls += [("candidate", "ok", None)] * 299 + [("candidate", "error", "server")]
    figs = figures(rows, calls)
    analysis = Analysis(at=CANARY_NOW, stage=figs, window=figs, window_s=900,
                        verdicts=evaluate(figs, cfg.gates, cfg.min_samples))
    state = CanaryState("direct->gateway-b", "direct", "gateway-b", "progressing", 25,
                        CANARY_NOW - 3600, CANARY_NOW - 3600, CANARY_NOW - 1800, 0, 4,
                        CANARY_NOW - 3600)
    history = (
        ActionRecord(at=CANARY_NOW - 3600, action="promote", actor="auto", source="auto",
                     from_pct=5, to_pct=25, from_status="progressing",
                     to_status="progressing", reason="every gate passed for the 24h bake time"),
        ActionRecord(at=CANARY_NOW - 90_000, action="start", actor="oncall", source="run",
                     from_pct=None, to_pct=5, from_status=None, to_status="progressing",
                     reason="first seen: stages [5, 25, 50, 100], mode auto"),
    )
    return CanaryView(cfg, state, analysis, history)


def keys_snapshot() -> Snapshot:
    """The mid-run snapshot with four keys in every state (fixed times, UTC)."""
    import dataclasses

    from swarm_tui.core.records import KeyRow

    t = CANARY_NOW
    keys = (
        KeyRow("gateway-a", "sk-…a1b2#3f9c1e", "primary", "env:GW_KEYS", "active", None, None,
               12, 4_210, 0, 3, 3_050_000, 4_620_000, t - 1),
        KeyRow("gateway-a", "sk-…c3d4#77ab02", "peak", "file", "cooling", t + 42, None, 0,
               3_977, 14, 14, 2_880_000, 4_370_000, t - 3),
        KeyRow("gateway-a", "sk-…e5f6#0c4d9a", "legacy", "file", "disabled", None,
               "401 Incorrect API key provided.", 0, 1, 0, 1, 0, 0, t - 600),
        KeyRow("gateway-a", "sk-…g7h8#5e21f0", "old", "added", "retired", None, None, 2, 812,
               1, 1, 590_000, 880_000, t - 5),
    )
    return dataclasses.replace(mid_run_snapshot(), keys=keys)


@dataclasses.dataclass
class CostRow:
    """A task row as the cost report reads it (engine agents and stored rows both are)."""

    state: str
    model: str
    tokens_in: int = 1_000
    tokens_out: int = 1_000
    gateway: str = "gw"
    bucket: str = "baseline"
    key_fp: str | None = "sk-…abcd#000000"
    cached_in: int = 0
    usage_estimated: bool = False
    cost_usd: float | None = None
    tasks: int = 1


def cost_report_fixture(budget_usd: float | None = None):
    """A 100-agent run's cost, fixed: 84 short tasks on DeepSeek, 16 long on Kimi."""
    from swarm_tui.engine.cost import cost_report
    from swarm_tui.prices import load_price_table

    prices = load_price_table(None, {}, "test")
    rows = []
    for i in range(100):
        model = "kimi-k2.5" if i % 6 == 0 else "deepseek-v3.2"
        t_in, t_out = (1_300, 1_140) if model == "kimi-k2.5" else (680, 1_110)
        rows.append(CostRow("succeeded", model, t_in, t_out, gateway="gateway-a",
                            key_fp="sk-…a1b2#3f9c1e", cost_usd=prices.cost(model, t_in, t_out)))
    return cost_report(rows, prices, run_id="20261202-093000-abcd", wall_s=42.0,
                       tasks_per_day=12_000, long_model="kimi-k2.5",
                       finished_s=[0.4 * i for i in range(100)], budget_usd=budget_usd)


def screen_text(app) -> str:
    """The current screen as plain text (what a user would read)."""
    try:
        return "\n".join("".join(seg.text for seg in strip)
                         for strip in app.screen._compositor.render_strips())
    except RuntimeError:  # read mid screen change: the next poll sees it
        return ""


async def wait_for(pred, timeout=60.0, what: str = "", seen=None):
    """Wait on state; the deadline only stops a broken test (a slow machine takes longer,
    it does not fail). When it fires it says what it waited for — `what`, or the
    predicate's own source line — and what it saw last (`seen()`, when given)."""
    import asyncio
    import inspect
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        await asyncio.sleep(0.05)
    if not what:
        try:
            what = inspect.getsource(pred).strip()
        except (OSError, TypeError):
            what = repr(pred)
    last = f"; last seen: {seen()!r}" if seen is not None else ""
    raise AssertionError(f"not reached in {timeout:.0f} s: {what}{last}")


async def steady(pilot, polls: int = 3) -> None:
    """Until the screen reads the same over `polls` polls in a row: nothing left to land
    before a picture is taken."""
    last, same = None, 0

    def unchanged() -> bool:
        nonlocal last, same
        now = screen_text(pilot.app)
        same, last = (same + 1 if now == last and now else 0), now
        return same >= polls

    await wait_for(unchanged, what="a steady screen")


async def open_screen(pilot, key: str, screen: type) -> None:
    """Press `key` once the console has drawn, then wait for `screen` on top, steady."""
    await wait_for(lambda: pilot.app.snapshot is not None, what="the first snapshot")
    await pilot.press(key)
    await wait_for(lambda: isinstance(pilot.app.screen, screen), what=screen.__name__)
    await steady(pilot)
