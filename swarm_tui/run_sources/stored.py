"""A run read from the store: watched while another process executes it, or replayed."""

from __future__ import annotations

import time
from pathlib import Path

import aiosqlite

from swarm_tui.config import LoadedConfig, SlaConfig
from swarm_tui.engine.cost import CostReport
from swarm_tui.engine.snapshot import (
    HIST_EDGES_MS,
    AgentCell,
    KeyRow,
    Snapshot,
    histogram_bucket,
)
from swarm_tui.engine.state import STATES, RunStatus, TaskState
from swarm_tui.engine.summary import summarize
from swarm_tui.errors import UserError
from swarm_tui.run_sources.base import AgentDetail
from swarm_tui.store import reads
from swarm_tui.store.control import queue_command
from swarm_tui.store.db import open_db
from swarm_tui.store.runs import RunRecord, get_run, list_runs, task_rows
from swarm_tui.workload import Task


class StoreSource:
    """A run read from the store: `watch` (another process writes it) or a replay."""

    kind = "watch"

    def __init__(self, db_path: Path, run_id: str | None, *, write: bool = False,
                 replay: bool = False, cfg: LoadedConfig | None = None) -> None:
        self.db_path = db_path
        self.cfg = cfg  # for the cost panel's price table (shipped table without it)
        self.run_id = run_id
        self.readonly = not write
        self.kind = "replay" if replay else "watch"
        self.conn: aiosqlite.Connection | None = None
        self.record: RunRecord | None = None
        self.error: str | None = None
        self.active = False
        self.paused = False  # as last commanded through the control table

    async def open(self) -> None:
        if self.conn is not None:
            return
        self.conn = await open_db(self.db_path, create=False)
        try:
            if self.run_id is None:
                runs = [r for r in await list_runs(self.conn, 20)
                        if r.effective_status() == RunStatus.RUNNING]
                if not runs:
                    raise UserError(f"database {self.db_path}: no running run to watch "
                                    "(give a RUN_ID, see `swarm-tui runs`)")
                self.run_id = runs[0].id
            await get_run(self.conn, self.run_id, self.db_path)  # unknown id: one line
        except BaseException:
            await self.close()  # aiosqlite's thread would keep the process alive
            raise

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    shutdown = close

    async def snapshot(self) -> Snapshot | None:
        assert self.conn is not None and self.run_id is not None
        self.record = run = await get_run(self.conn, self.run_id, self.db_path)
        stored = await task_rows(self.conn, self.run_id)
        s = summarize(stored, run_id=run.id, sla=run.sla, wall_ms=run.wall_ms,
                      status=run.effective_status(), simulated=run.simulated)
        status = run.effective_status()
        self.active = status == RunStatus.RUNNING
        self.paused = await reads.last_pause_command(self.conn, self.run_id) == "pause"
        if self.active and self.paused:
            status = RunStatus.PAUSED
        elapsed = (time.time() - run.started_at) if self.active else run.wall_ms / 1000
        counts: dict[str, int] = dict.fromkeys(STATES, 0)
        for t in stored:
            counts[t.state] = counts.get(t.state, 0) + 1
        hist = [0] * (len(HIST_EDGES_MS) + 1)
        for t in stored:
            if t.state == TaskState.SUCCEEDED and t.latency_ms is not None:
                hist[histogram_bucket(t.latency_ms)] += 1
        log = await self._log_lines(run.started_at)
        live = await reads.live_figures(self.conn, self.run_id)  # the executor's heartbeat
        keys, _ = await self.keys()
        canary = "canary: off"
        c = self.cfg.settings.canary if self.cfg is not None else None
        if c is not None and c.enabled and self.kind == "watch":
            from swarm_tui.store.canary import read_state

            state = await read_state(self.conn, c.name)
            if state is not None:
                canary = f"canary {state.pct}% {state.status}"
        per_task = s.cost_per_task_usd
        tpd = int(run.config.get("settings", {}).get("tasks_per_day", 12000))
        cells = tuple(AgentCell(t.seq, t.task_id, t.state, t.model, t.bucket, t.latency_ms,
                                t.cost_usd, t.attempts, t.error_class) for t in stored)
        return Snapshot(
            run_id=run.id, simulated=run.simulated,
            gateways=tuple(run.config.get("gateways", {}) or (run.config.get("gateway", "?"),)),
            status=status, elapsed_s=elapsed, total=run.total, counts=counts,
            in_flight=int(live.get("in_flight", 0)) if self.active else 0,
            concurrency=int(live.get("concurrency") or run.config.get("concurrency", 0)),
            calls_per_s=(s.succeeded + s.failed) / elapsed if elapsed > 0 else 0.0,
            success_rate=s.success_rate, call_success_rate=s.call_success_rate, calls=s.calls,
            client_bound=bool(live.get("client_bound")) if self.active else s.client_bound,
            latency_ms=(s.latency_ms.p50, s.latency_ms.p95, s.latency_ms.p99),
            ttft_ms=(s.ttft_ms.p50, s.ttft_ms.p95), tokens_in=s.tokens.input,
            tokens_out=s.tokens.output, cost_usd=s.cost_usd, unpriced_tasks=s.unpriced_tasks,
            usage_estimated=bool(s.tokens.estimated_tasks),
            projected_month_usd=per_task * tpd * 30 if per_task is not None else None,
            sla=SlaConfig.model_validate(run.sla.model_dump()), agents=cells, log=log,
            histogram=tuple(hist), sparkline=(), readonly=self.readonly, source=self.kind,
            errors=s.errors, keys=keys, canary=canary,
            budget_usd=run.config.get("budget_usd"))

    async def _log_lines(self, started_at: float) -> tuple[str, ...]:
        """This run's stored log — failed attempts, fallbacks, controls, key and canary
        actions — the last 100, in the live log's format."""
        assert self.conn is not None and self.run_id is not None
        errs, events = await reads.log_rows(self.conn, self.run_id)
        lines = [(at, f"RETRY  {tid} #{n} {c} {sc or ''} +{w or 0:.2f}s" if w is not None
                  else f"FAIL   {tid} #{n} {c} {sc or ''} {(m or '')[:60]}")
                 for at, tid, n, c, sc, w, m in errs]
        tags = {"control": "CTRL  ", "fallback": "FALLBK"}
        lines += [(at, f"{tags.get(kind, kind.upper()[:6]):6} {detail or ''}")
                  for at, kind, detail in events]
        lines.sort(key=lambda x: x[0])
        return tuple(f"{at - started_at:7.1f}s {text}" for at, text in lines[-100:])

    async def detail(self, seq: int) -> AgentDetail | None:
        assert self.conn is not None and self.run_id is not None
        row, attempts = await reads.task_detail_row(self.conn, self.run_id, seq)
        if row is None:
            return None
        task = Task.model_validate_json(row[7])
        return AgentDetail(
            seq=row[0], task_id=row[1], state=row[2], model=row[3], gateway=row[4],
            bucket=row[5], key_fp=row[6], prompt=task.prompt, latency_ms=row[8], ttft_ms=row[9],
            queue_ms=row[10], tokens_in=row[11], tokens_out=row[12], cost_usd=row[13],
            error=f"{row[14]}: {row[15]}" if row[14] else None, response_text=row[16],
            attempts=attempts)

    async def keys(self) -> tuple[tuple[KeyRow, ...], str | None]:
        """The run's keys as its writer last stored them (with the heartbeat)."""
        assert self.conn is not None and self.run_id is not None
        return await reads.stored_keys(self.conn, self.run_id), None

    async def cost(self) -> CostReport | None:
        from swarm_tui.config import Settings
        from swarm_tui.prices import load_price_table
        from swarm_tui.report.cost import stored_cost

        if self.conn is None or self.run_id is None:
            return None
        if self.cfg is None:
            self.cfg = LoadedConfig(settings=Settings(), path=None,
                                    prices=load_price_table(None, {}, "shipped price table"))
        run = await get_run(self.conn, self.run_id, self.db_path)
        return await stored_cost(self.conn, run, self.cfg)

    async def key_op(self, op: str, ref: str, secret: str | None = None,
                     label: str | None = None) -> str:
        """retire / enable through the control table; a key itself never goes through the
        store, so `add` is the key file's job (the runner reloads it)."""
        if op == "add":
            raise UserError("key add: a watched run takes new keys from its gateway's key "
                            "file (`swarm-tui keys add` appends to it)")
        if not await self.control(f"key_{op}", ref):
            raise UserError(f"key {op}: read-only (watch --write to allow it)")
        return f"key {ref}: {op} sent to the run (applied within a second)"

    async def control(self, command: str, arg: str | None = None) -> bool:
        """Queue a command for the runner process (it polls the control table)."""
        if self.readonly or self.conn is None or self.kind == "replay" or self.run_id is None:
            return False
        if self.record is not None and not self.record.owner_alive():
            return False  # no living executor would ever apply it (resume the run first)
        await queue_command(self.conn, self.run_id, command, arg)
        if command in ("pause", "resume"):
            self.paused = command == "pause"
        return True
