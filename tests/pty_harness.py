"""The real `swarm-tui` binary on a pseudo-terminal of a real size, its screen rendered by
pyte (a VT100 emulator), so tests assert on what a person in tmux at 80x24 would see.

`run_test()` pilots drive the app inside pytest's process with Textual's own driver; they
never met the terminal (the 16-colour theme passed there and crashed here).
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import sys
import termios
import time
from collections.abc import Callable

import pyte


class PtyApp:
    def __init__(self, *args: str, env: dict[str, str] | None = None, cols: int = 80,
                 rows: int = 24, term: str = "xterm-256color") -> None:
        self.cols, self.rows = cols, rows
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = bytearray()
        pid, fd = pty.fork()
        if pid == 0:  # the child: the real command line, as a user starts it
            os.environ.update(env or {})
            os.environ["TERM"] = term
            os.environ.pop("CI", None)
            os.execv(sys.executable, [sys.executable, "-m", "swarm_tui", *args])
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.returncode: int | None = None

    def pump(self, timeout: float = 0.05) -> None:
        while True:
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if not ready:
                return
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return
            if not data:
                return
            self.raw += data
            self.stream.feed(data)
            timeout = 0.0

    def text(self) -> str:
        self.pump()
        return "\n".join(self.screen.display)

    def wait_for(self, pred: Callable[[str], bool] | str, timeout: float = 30.0,
                 what: str = "") -> str:
        """Pump output until the rendered screen satisfies `pred` (state, not time)."""
        check = (lambda t: pred in t) if isinstance(pred, str) else pred
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump(0.1)
            text = "\n".join(self.screen.display)
            if check(text):
                return text
            if self.poll() is not None:
                self.pump(0.2)  # what it printed on the way out (an error line)
                break
        raise AssertionError(f"screen never showed {what or pred!r}; it shows:\n"
                             f"{chr(10).join(self.screen.display)}\nraw tail: "
                             f"{bytes(self.raw[-600:])!r}; exit {self.returncode}")

    def send(self, keys: str | bytes) -> None:
        os.write(self.fd, keys.encode() if isinstance(keys, str) else keys)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            self.pump(0.1)
        if self.returncode is None:
            raise AssertionError(f"the app did not exit; it shows:\n{self.text()}")
        self.pump()
        return self.returncode

    def hang_up(self, timeout: float) -> int | None:
        """The terminal goes away (an SSH drop): this side of the pty is closed — the kernel
        sends SIGHUP, and every later write to the terminal fails — then up to `timeout`
        seconds for the exit. Its code, or None when none came."""
        os.close(self.fd)
        self.fd = -1
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.returncode

    def kill(self) -> None:
        """Idempotent: the end of every test, whatever happened before."""
        if self.returncode is None:
            try:
                if self.poll() is None:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
                    self.returncode = -signal.SIGKILL
            except (ChildProcessError, ProcessLookupError):
                self.returncode = -1
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
