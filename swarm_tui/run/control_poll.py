"""Commands another process queued for a run (`watch --write`, `swarm-tui ... pause`),
applied to this process's runner: the run host's part, between the writer's flushes.

The store keeps the queue's rows (store/control.py); what a command does to a swarm is
the engine's (engine/control.py); this joins the two. It runs on the writer's connection
as the writer's `between_flushes` step, so a poll never lands inside a commit; the
runner's lines about a command are signed by the run's recorder.
"""

from __future__ import annotations

import sqlite3

from swarm_tui.engine.control import apply_command
from swarm_tui.run.recorder import RunRecorder
from swarm_tui.store import control
from swarm_tui.store.fences import LeaseFence


class ControlPoll:
    """A single executor marks each command done; workers each apply every command
    queued since they joined (a pause pauses them all), leaving it for the others."""

    def __init__(self, recorder: RunRecorder) -> None:
        self.recorder = recorder
        self.writer = writer = recorder.writer
        self.broadcast = isinstance(writer.fence, LeaseFence)
        self.seen: int | None = None  # workers: the last command applied
        writer.between_flushes = self.apply

    async def apply(self) -> None:
        w = self.writer
        try:
            if self.broadcast and self.seen is None:
                self.seen = await control.last_command_id(w.conn, w.run_id)
                return
            rows = (await control.commands_after(w.conn, w.run_id, self.seen or 0)
                    if self.broadcast else await control.commands_pending(w.conn, w.run_id))
            for cid, command, arg, actor in rows:
                who = actor or "?"
                with self.recorder.signed(who) as signature:
                    ok = apply_command(self.recorder.runner, command, arg)
                if self.broadcast:
                    self.seen = cid
                else:
                    await control.mark_done(w.conn, cid)
                if not ok or not signature.said:
                    # what the runner said of it is the record (one line, with who sent
                    # it: `watch --write` logged each command twice, once as raw JSON);
                    # a refusal, or a command it applied silently, is said here
                    what = f"{command} {arg or ''}".strip()
                    w.log_event("control" if ok else "control_rejected",
                                f"{what} (by {who})" if ok else
                                f"{what}: not applied (by {who})", actor)
        except sqlite3.Error:
            pass  # a poll that fails is tried again; the flush reports the store
