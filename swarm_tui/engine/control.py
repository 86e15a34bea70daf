"""How the engine applies a command an operator sends a running swarm (core/commands.py:
from this process's console, or through the store from `watch --write` / another
process), and what the run's recorder and command poll may see of its executor.

The run host (run/recorder.py, control_poll.py) and the console import this module,
never the runner itself (SwarmRunner satisfies `Executor`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from swarm_tui.core import events as ev
from swarm_tui.core.commands import Command
from swarm_tui.engine.looplag import LoopLag
from swarm_tui.errors import UserError

if TYPE_CHECKING:  # types only: the store must not depend on the runner's module
    from swarm_tui.core.records import Attempt, TaskRecord
    from swarm_tui.gateway.client import GatewayClient


__all__ = ["Executor", "apply_command"]


class Executor(Protocol):
    """What the run's recorder reads of the run it records, and a command acts on."""

    records: list[TaskRecord]
    consumers: list[ev.Consumer]
    holds: dict[str, str]
    started_wall: float
    wall_ms: float
    in_flight: int
    limit: int
    paused: bool
    retry_waiting: int
    loop_lag: LoopLag
    send_permit: Callable[[], str | None] | None

    @property
    def gateways(self) -> Mapping[str, GatewayClient]: ...
    def hold(self, reason: str, detail: str) -> None: ...
    def release(self, reason: str, detail: str) -> None: ...
    def stop(self, reason: str, detail: str) -> None: ...
    def now_ms(self) -> float: ...
    # the commands
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def cancel(self) -> None: ...
    def set_concurrency(self, n: int) -> None: ...
    def cancel_agent(self, index: int) -> None: ...
    def wake(self) -> None: ...
    def emit(self, kind: ev.EventKind, rec: TaskRecord | None = None,
             attempt: Attempt | None = None, detail: str | None = None) -> None: ...


def apply_command(runner: Executor, command: str, arg: str | None) -> bool:
    """Apply one command on the runner's own loop. False: not understood (an unknown
    command, a missing or bad argument, no such key)."""
    from swarm_tui.gateway import keyops

    try:
        cmd = Command(command)
        if cmd in (Command.KEY_RETIRE, Command.KEY_ENABLE):
            if not arg:
                return False
            op = keyops.retire if cmd is Command.KEY_RETIRE else keyops.enable
            runner.emit(ev.CONTROL, detail=op(runner.gateways, arg))
            runner.wake()
        elif cmd is Command.PAUSE:
            runner.pause()
        elif cmd is Command.RESUME:
            runner.resume()
        elif cmd is Command.CANCEL:
            runner.cancel()
        elif cmd is Command.CONCURRENCY and arg:
            runner.set_concurrency(int(arg))
        elif cmd is Command.CANCEL_AGENT and arg:
            seq = int(arg)
            for rec in runner.records:
                if rec.seq == seq:
                    runner.cancel_agent(rec.index)
        else:
            return False
    except (ValueError, UserError):
        return False
    return True
