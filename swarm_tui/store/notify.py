"""Wake a reader when another process has written (PostgreSQL LISTEN/NOTIFY).

A writer says what changed with `notify` inside the transaction that changed it (it is
delivered on commit, never for a rolled-back write); a reader's `Listener` — one
connection of its own, in LISTEN — remembers which keys (a run id, a canary name) were
named since it last asked. SQLite has no such channel: there is no listener, and readers
poll as before. Polling stays on PostgreSQL too, slowly, as the net under a lost
notification (a dropped listening connection).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from swarm_tui.aio import cancel_and_wait
from swarm_tui.store.conn import StoreConnection, dialect_of
from swarm_tui.store.target import DbTarget, PgTarget

if TYPE_CHECKING:  # imported where a server is listened to: a SQLite command never pays
    import psycopg  # its ~45 ms import

ROWS = "swarm_tui_rows"        # a run's rows, live figures, heartbeat: payload run id
CONTROL = "swarm_tui_control"  # a command queued for a run: payload run id
CANARY = "swarm_tui_canary"    # a canary's state moved: payload its name


async def notify(conn: StoreConnection, channel: str, key: str) -> None:
    """In the writer's transaction: readers listening on `channel` hear `key` on commit."""
    if dialect_of(conn) == "postgresql":
        await conn.execute("SELECT pg_notify(?, ?)", (channel, key))


class Listener:
    """Keys named on some channels since they were last taken; `on_notify` is called on
    the listener's loop for each (e.g. to wake a waiting task at once). A lost connection
    (server restart, cut link) is listened again with backoff; what was notified while it
    was down is read by the readers' polls, and each key is taken as named once it is back
    (`on_notify` with key "*": look now)."""

    def __init__(self, raw: psycopg.AsyncConnection, target: PgTarget,
                 channels: tuple[str, ...],
                 on_notify: Callable[[str, str], None] | None) -> None:
        self._raw = raw
        self._target = target
        self._channels = channels
        self._heard: set[tuple[str, str]] = set()
        self._everything = False  # back after a loss: every key counts as named once
        self._on_notify = on_notify
        import asyncio  # here: a command that only queues a notify never loads a loop

        self._task = asyncio.create_task(self._listen())
        self.lost = False  # the connection failed: readers fall back to their polls

    @classmethod
    async def open(cls, target: DbTarget, channels: Iterable[str],
                   on_notify: Callable[[str, str], None] | None = None) -> Listener | None:
        """None on SQLite, or when the server cannot be listened to (readers poll)."""
        if not isinstance(target, PgTarget):
            return None
        import psycopg

        names = tuple(channels)
        try:
            raw = await cls._connect(target, names)
        except psycopg.Error:
            return None
        return cls(raw, target, names, on_notify)

    @staticmethod
    async def _connect(target: PgTarget, channels: tuple[str, ...]) -> psycopg.AsyncConnection:
        import psycopg

        from swarm_tui.store.pg import connect_kwargs

        raw = await psycopg.AsyncConnection.connect(
            target.url, **connect_kwargs("swarm-tui listen", target.url))
        try:
            for channel in channels:
                await raw.execute(f"LISTEN {channel}")
        except psycopg.Error:
            await raw.close()
            raise
        return raw

    async def _listen(self) -> None:
        import asyncio

        import psycopg

        from swarm_tui.store.pg import RECONNECT_BACKOFF_S

        backoff = RECONNECT_BACKOFF_S[0]
        while True:
            try:
                async for n in self._raw.notifies():
                    self._heard.add((n.channel, n.payload))
                    if self._on_notify is not None:
                        self._on_notify(n.channel, n.payload)
                return  # the generator ended: closed by us
            except psycopg.Error:
                self.lost = True
            with contextlib.suppress(psycopg.Error):
                await self._raw.close()
            while self.lost:
                await asyncio.sleep(backoff)
                try:
                    self._raw = await self._connect(self._target, self._channels)
                except psycopg.Error:
                    backoff = min(backoff * 2, RECONNECT_BACKOFF_S[1])
                    continue
                backoff = RECONNECT_BACKOFF_S[0]
                self.lost = False
                self._everything = True
                if self._on_notify is not None:
                    for channel in self._channels:
                        self._on_notify(channel, "*")

    def take(self, channel: str, key: str) -> bool:
        """Whether `key` was named on `channel` since the last take (then forgotten)."""
        if self._everything:
            self._everything = False
            return True
        if (channel, key) in self._heard:
            self._heard.discard((channel, key))
            return True
        return False

    async def close(self) -> None:
        import psycopg

        try:
            with contextlib.suppress(psycopg.Error):
                await cancel_and_wait(self._task)
        finally:
            with contextlib.suppress(psycopg.Error):
                await self._raw.close()
