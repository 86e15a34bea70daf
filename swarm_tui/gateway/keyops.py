"""Live key operations on running gateways: add, retire, enable, and the key file reload.

All of these run on the engine's loop (the console marshals them there), so the
pool needs no lock. Messages name keys by fingerprint only.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from swarm_tui.aio import cancel_and_wait
from swarm_tui.errors import UserError
from swarm_tui.gateway.client import GatewayClient
from swarm_tui.gateway.keypool import ACTIVE, RETIRED, KeySlot
from swarm_tui.gateway.keys import key_problem, read_key_file

FILE_POLL_S = 1.0  # an edited key file is picked up within this


def find_key(gateways: Mapping[str, GatewayClient], ref: str) -> tuple[GatewayClient, KeySlot]:
    """`fingerprint` or `gateway:fingerprint` (a unique part of it is enough)."""
    gw_name, _, fp = ref.rpartition(":") if ref.count(":") == 1 else ("", "", ref)
    matches = [(gw, slot) for name, gw in gateways.items() if not gw_name or name == gw_name
               for slot in [gw.pool.find(fp)] if slot is not None]
    if len(matches) != 1:
        why = "no key matches" if not matches else "several keys match"
        raise UserError(f"key {ref}: {why} (use the fingerprint from `swarm-tui keys list`)")
    return matches[0]


def retire(gateways: Mapping[str, GatewayClient], ref: str) -> str:
    gw, slot = find_key(gateways, ref)
    if slot.state == RETIRED:
        return f"key {slot.fingerprint} on {gw.name}: already retired"
    gw.pool.retire(slot)
    return (f"key {slot.fingerprint} on {gw.name}: retired ({slot.in_flight} in flight "
            "finish on it)")


def enable(gateways: Mapping[str, GatewayClient], ref: str) -> str:
    gw, slot = find_key(gateways, ref)
    was = slot.status()
    gw.pool.enable(slot)
    return f"key {slot.fingerprint} on {gw.name}: enabled (was {was})"


def add(gw: GatewayClient, secret: str, label: str | None, source: str = "added") -> str:
    secret = secret.strip()
    problem = key_problem(secret)
    if problem is not None:
        raise UserError(f"key: {problem}")
    existing = gw.pool.by_secret(secret)
    if existing is not None and existing.state == ACTIVE:
        return f"key {existing.fingerprint} on {gw.name}: already in the pool"
    if existing is not None:
        gw.pool.enable(existing)
        return f"key {existing.fingerprint} on {gw.name}: back in the pool"
    slot = gw.add_key(secret, label, source)
    return f"key {slot.fingerprint} on {gw.name}: added"


def sync_file(gw: GatewayClient, keys: list[tuple[str, str | None]]) -> list[str]:
    """Make the pool follow the key file: new lines are added, removed lines retired
    (their calls in flight finish), a line that comes back is enabled again."""
    msgs: list[str] = []
    wanted = {k for k, _ in keys}
    for secret, label in keys:
        slot = gw.pool.by_secret(secret)
        if slot is None:
            msgs.append(add(gw, secret, label, "file") + " (key file)")
        elif slot.state == RETIRED and slot.source == "file":
            gw.pool.enable(slot)
            msgs.append(f"key {slot.fingerprint} on {gw.name}: back in the key file, enabled")
    for slot in gw.pool.slots:
        if slot.source == "file" and slot.secret not in wanted and slot.state != RETIRED:
            gw.pool.retire(slot)
            msgs.append(f"key {slot.fingerprint} on {gw.name}: removed from the key file, "
                        "retired")
    return msgs


class KeyFileWatcher:
    """Polls one gateway's key file; an unreadable or unsafe file keeps the current keys."""

    def __init__(self, gw: GatewayClient, path: Path, insecure: bool,
                 report: Callable[[str], None]) -> None:
        self.gw = gw
        self.path = path
        self.insecure = insecure
        self.report = report
        self._seen = self._stamp()
        self._task: asyncio.Task[None] | None = None

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_mode

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(FILE_POLL_S)
            self.check()

    def check(self) -> None:
        stamp = self._stamp()
        if stamp == self._seen:
            return
        self._seen = stamp
        try:
            keys = read_key_file(self.path, self.insecure)
        except UserError as e:
            self.report(f"{e}; keeping the current keys")
            return
        for msg in sync_file(self.gw, keys):
            self.report(msg)

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
