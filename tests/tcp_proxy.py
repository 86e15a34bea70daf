"""A TCP proxy in its own process that a test cuts and restores: the link between a
client and its server (a partition, a load balancer's reset, a pooler restart).

    python -m tests.tcp_proxy LISTEN_PORT TARGET_PORT

Prints `ready` once listening. SIGUSR1 cuts: every relayed connection is reset and new
ones are refused (the listening socket is closed). SIGUSR2 restores. SIGTERM exits.
stdout gets one line per state change (`cut N`, `restored`) for the test's log."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import struct
import sys


class Proxy:
    def __init__(self, listen: int, target: int) -> None:
        self.listen, self.target = listen, target
        self.server: asyncio.Server | None = None
        self.links: set[asyncio.StreamWriter] = set()

    async def open(self) -> None:
        self.server = await asyncio.start_server(self._link, "127.0.0.1", self.listen,
                                                 reuse_address=True)

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        self.links |= {writer, up_w}
        await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer))

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self.links.discard(dst)
            with contextlib.suppress(OSError):
                dst.close()

    def cut(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        n = len(self.links)
        for w in list(self.links):
            sock = w.get_extra_info("socket")
            if sock is not None:  # an RST, as a reset link shows, not a polite FIN
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
            w.close()
        self.links.clear()
        print(f"cut {n}", flush=True)

    async def restore(self) -> None:
        if self.server is None:
            await self.open()
        print("restored", flush=True)


async def main(listen: int, target: int) -> None:
    proxy = Proxy(listen, target)
    await proxy.open()
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, proxy.cut)
    loop.add_signal_handler(signal.SIGUSR2, lambda: loop.create_task(proxy.restore()))
    loop.add_signal_handler(signal.SIGTERM, done.set)
    print("ready", flush=True)
    await done.wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
