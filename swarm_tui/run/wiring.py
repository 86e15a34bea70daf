"""Everything a run needs, built once: gateways (or the simulator), runner, consumers.

The headless CLI, the console and the tests all go through here, so they drive
the same engine the same way.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import overload

from swarm_tui.core.events import Consumer
from swarm_tui.core.records import TaskHead
from swarm_tui.core.summary import RunSummary, summarize
from swarm_tui.engine.bodies import TaskBodies
from swarm_tui.engine.routing import CanaryRouter, Router, SingleGateway
from swarm_tui.engine.runner import RunPolicy, SwarmRunner
from swarm_tui.errors import UserError
from swarm_tui.gateway.client import GatewayClient, Transport
from swarm_tui.gateway.client_cert import client_tls
from swarm_tui.gateway.keyops import KeyFileWatcher
from swarm_tui.gateway.keys import fingerprint, keys_from_env, read_key_file
from swarm_tui.settings.loader import LoadedConfig
from swarm_tui.settings.sections import (
    SIM_CANARY,
    SIM_CANARY_GATEWAY,
    SIM_GATEWAY,
    CanaryConfig,
    GatewayConfig,
)
from swarm_tui.sim.server import SimProcess
from swarm_tui.sim.settings import SimSettings
from swarm_tui.workload import DEMO_POISON, Task


@dataclass
class RunOptions:
    gateway: str | None = None
    concurrency: int | None = None
    stream: bool | None = None
    model: str | None = None
    sim: SimSettings = field(default_factory=SimSettings)
    preflight: bool = True
    insecure_key_file: bool = False
    transport: Transport = "wire"
    seed: int | None = None
    name: str | None = None
    budget_usd: float | None = None     # overrides the config's budget_usd
    canary_demo: bool = False           # simulated canary: direct-profile baseline → candidate
    spent_before_usd: float = 0.0       # a resumed run's cost so far
    max_calls_per_s: float | None = None  # open-loop pace (`--rate`)
    incidents: bool = False             # simulator only: the demo's scripted trouble
    keep_answers: bool = True           # False: the store keeps them (see RunPolicy)
    metrics_port: int | None = None     # serve Prometheus /metrics while the run executes
    metrics_bind: str = "127.0.0.1"
    metrics_linger_s: float = 0.0       # after the run, until its final figures are scraped


# The console demo's scripted trouble, on the simulator: a document the long-context
# model chokes on (retries, then the fallback), a little stream noise on that model
# (retries), and demo-key-a's quota running out from 8 s to 16 s (it cools, demo-key-b
# takes the traffic) — and still a gateway that meets the SLA (99 % of calls, p95
# 350 ms): an incident that breaks it is one the user scripts (--sim-rate-503 0.05 …).
DEMO_INCIDENTS = {"fault_models": ["kimi-k2.5"], "rate_stream_error": 0.01, "rate_429": 0.0,
                  "rate_503": 0.0,
                  "poison_text": DEMO_POISON, "outage_start_s": 8.0, "outage_s": 8.0}
DEMO_KEYS = ("demo-key-a", "demo-key-b")


def gateway_keys(name: str, gw: GatewayConfig, insecure: bool
                 ) -> list[tuple[str, str | None, str]]:
    """(key, label, source) from the gateway's env vars and key file."""
    keys = [(k, label, f"env:{label}") for k, label in keys_from_env(gw.key_env)]
    if gw.key_file is not None:
        keys += [(k, label, "file")
                 for k, label in read_key_file(gw.key_file.expanduser(), insecure)]
    if not keys:
        sources = [f"${n}" for n in gw.key_env] + ([str(gw.key_file)] if gw.key_file else [])
        where = " or ".join(sources) if sources else "key_env / key_file in the config"
        raise UserError(f"gateway '{name}': no API key found (set {where})")
    return keys


def pick_gateway_name(cfg: LoadedConfig, requested: str | None) -> str:
    gws = cfg.settings.gateways
    if requested:
        if requested != SIM_GATEWAY and requested not in gws:
            known = ", ".join(sorted([*gws, SIM_GATEWAY]))
            raise UserError(f"--gateway {requested}: no such gateway (known: {known})")
        return requested
    if not gws:
        return SIM_GATEWAY
    if cfg.settings.default_gateway:
        return cfg.settings.default_gateway
    if len(gws) == 1:
        return next(iter(gws))
    raise UserError(f"config {cfg.path}: several gateways; pass --gateway NAME or set "
                    "default_gateway")


class RunSetup:
    """Owns the simulator (if any) and the gateway clients for one run."""

    def __init__(self, cfg: LoadedConfig, opts: RunOptions) -> None:
        self.cfg = cfg
        self.opts = opts
        self.sim: SimProcess | None = None
        self.sim_baseline: SimProcess | None = None
        s = cfg.settings
        # A configured canary splits traffic unless the run names one gateway explicitly.
        self.canary: CanaryConfig | None = (
            s.canary if s.canary is not None and s.canary.enabled and not opts.gateway else None)
        self.gateway_name = (self.canary.baseline if self.canary
                             else pick_gateway_name(cfg, opts.gateway))
        self.simulated = self.gateway_name == SIM_GATEWAY
        if opts.incidents and not self.simulated:
            raise UserError("--sim-incidents: only on the built-in simulator")
        if opts.canary_demo:
            if not self.simulated:
                raise UserError("--canary-demo: only on the built-in simulator (no gateways "
                                "configured, or --gateway sim)")
            self.canary = SIM_CANARY
        self.concurrency = opts.concurrency or s.concurrency
        if not self.simulated:
            gw_cfg = s.gateways[self.gateway_name]
            self.concurrency = min(self.concurrency, gw_cfg.max_concurrency)
        self.gateways: dict[str, GatewayClient] = {}
        self.router: Router = (CanaryRouter(self.canary.baseline, self.canary.candidate)
                               if self.canary else SingleGateway(self.gateway_name))
        self.runner: SwarmRunner | None = None

    def open(self) -> None:
        """Start the simulator if needed and build each client once."""
        s = self.cfg.settings
        if self.simulated:
            # in memory only, like any key; the simulator accepts any key, so keys added
            # from the console work in the demo
            keys: list[tuple[str, str | None]] = [("sk-sim-" + secrets.token_hex(16),
                                                   "simulator")]
            sim_settings = self.opts.sim
            if self.opts.incidents:
                # a fault the user set on the command line wins over the script's
                fields = type(sim_settings).model_fields
                sim_settings = sim_settings.model_copy(update={
                    k: v for k, v in DEMO_INCIDENTS.items()
                    if getattr(sim_settings, k) == fields[k].default})
                keys = [("sk-sim-" + secrets.token_hex(16), label) for label in DEMO_KEYS]
                if sim_settings.outage_key_fp is None:
                    sim_settings = sim_settings.model_copy(
                        update={"outage_key_fp": fingerprint(keys[0][0])})
            self.sim = self._start_sim(sim_settings)
            sims = [(SIM_GATEWAY, self.sim)]
            if self.canary is not None:  # the team's move: direct provider → gateway
                # (its 429s off unless asked for with --sim-rate-429: with the demo's
                # single key each pauses the baseline for the Retry-After, which is right
                # for a real limit but slow to watch)
                quiet = {} if self.opts.sim.rate_429 is not None else {"rate_429": 0.0}
                baseline = self.opts.sim.model_copy(update={"profile": "direct", **quiet})
                self.sim_baseline = self._start_sim(baseline)
                sims = [(SIM_GATEWAY, self.sim_baseline), (SIM_CANARY_GATEWAY, self.sim)]
            for name, proc in sims:
                self.gateways[name] = GatewayClient(
                    name, proc.base_url, keys,
                    pool=self.concurrency, timeout_s=30.0,
                    stream=True if self.opts.stream is None else self.opts.stream,
                    simulated=True, transport=self.opts.transport,
                    retry_after_cap_s=s.retry.retry_after_cap_s,
                )
            return
        names = ([self.canary.baseline, self.canary.candidate] if self.canary
                 else [self.gateway_name])
        for name in names:
            gw = s.gateways[name]
            tls = (None if gw.client_cert is None else client_tls(
                f"gateway '{name}'", gw.client_cert, gw.client_key))
            self.gateways[name] = GatewayClient(
                name, gw.base_url, gateway_keys(name, gw, self.opts.insecure_key_file),
                pool=max(self.concurrency, gw.max_concurrency), timeout_s=gw.timeout_s,
                stream=gw.stream if self.opts.stream is None else self.opts.stream,
                pinned_model=gw.model, transport=self.opts.transport,
                strategy=gw.key_strategy, retry_after_cap_s=s.retry.retry_after_cap_s,
                quota_scope=gw.quota_scope, tls=tls,
            )

    def _start_sim(self, settings: SimSettings) -> SimProcess:
        try:
            return SimProcess(settings).start()
        except (OSError, RuntimeError) as e:
            raise UserError(f"built-in simulator: could not start: {e}", 1) from None

    def key_watchers(self, report: Callable[[str], None]) -> list[KeyFileWatcher]:
        """One watcher per gateway with a key file: edits reach the running pool."""
        out = []
        for name, gw in self.gateways.items():
            conf = self.cfg.settings.gateways.get(name)
            if conf is not None and conf.key_file is not None:
                out.append(KeyFileWatcher(gw, conf.key_file.expanduser(),
                                          self.opts.insecure_key_file, report))
        return out

    async def preflight(self) -> list[str]:
        """Warnings (a rejected key disabled, a busy gateway); raises when nothing works."""
        warnings: list[str] = []
        if self.opts.preflight:
            for gw in self.gateways.values():
                warnings += await gw.preflight()
        return warnings

    def make_runner(
        self, tasks: Sequence[Task | TaskHead], consumers: Iterable[Consumer] = (),
        *, seqs: Sequence[int] | None = None, prior_attempts: Sequence[int] | None = None,
        bodies: TaskBodies | None = None,
    ) -> SwarmRunner:
        s = self.cfg.settings
        tasks = [self.forced_model(t) for t in tasks]
        budget = self.opts.budget_usd if self.opts.budget_usd is not None else s.budget_usd
        policy = RunPolicy(self.concurrency, s.retry, s.routing, s.default_model, budget,
                           self.opts.spent_before_usd, self.opts.max_calls_per_s,
                           keep_answers=self.opts.keep_answers)
        self.runner = SwarmRunner(tasks, self.gateways, self.router, policy,
                                  self.cfg.prices, consumers, seed=self.opts.seed, seqs=seqs,
                                  prior_attempts=prior_attempts, bodies=bodies)
        return self.runner

    @overload
    def forced_model(self, task: Task) -> Task: ...
    @overload
    def forced_model(self, task: TaskHead) -> TaskHead: ...

    def forced_model(self, task: Task | TaskHead) -> Task | TaskHead:
        """`--model`: the model of every task that names none (stored so, for resume)."""
        model = self.opts.model
        if not model or task.model:
            return task
        if isinstance(task, Task):
            return task.model_copy(update={"model": model})
        return dataclasses.replace(task, model=model)

    def summary(self, run_id: str, status: str) -> RunSummary:
        assert self.runner is not None
        r = self.runner
        lag = (r.loop_lag.run_p95_ms(), r.loop_lag.run_max_ms())
        return summarize(r.records, run_id=run_id, sla=self.cfg.settings.sla, wall_ms=r.wall_ms,
                         client_lag=lag,
                         name=self.opts.name, status=status, simulated=self.simulated,
                         started_at=r.started_wall)

    async def aclose(self) -> None:
        for gw in self.gateways.values():
            await gw.aclose()
        for proc in (self.sim, self.sim_baseline):
            if proc is not None:
                proc.stop()
        self.sim = self.sim_baseline = None
