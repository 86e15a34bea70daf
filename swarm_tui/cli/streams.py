"""Standard output and error as this program writes to them: UTF-8 whatever the locale,
shown (never obeyed) on a terminal, a refused write named, a reader that left no error."""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import Any

from swarm_tui.core.fmt import shown
from swarm_tui.errors import UserError


def speak_utf8() -> None:
    """Standard output and error in UTF-8 whatever the locale says (as Python's UTF-8
    mode does): on a bastion with `LANG=en_US` (ISO-8859-1) the first `≤` raised
    UnicodeEncodeError — `report` printed nothing, a paid run's summary was lost and its
    exit 3 turned into 1. A terminal on such a locale shows a few glyphs garbled; a pipe
    or a file gets exact UTF-8."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "utf-8"
        if isinstance(stream, io.TextIOWrapper) and codecs.lookup(encoding).name != "utf-8":
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(encoding="utf-8")


def stdout_to_null() -> None:
    """What standard output still holds goes nowhere (else the exit's flush fails
    again: a second message and exit 120)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class StdoutError(OSError):
    """Standard output refused a write (not a reader that left: BrokenPipeError)."""


class TerminalStream:
    """Standard output or error as this program writes to them. On a terminal, the text
    is shown, not obeyed: a control character in a task id, a gateway's error or a
    model's answer arrives as its picture (`␛[2J`, core/fmt.shown), so it cannot clear
    the screen, retitle the window or fake a verdict. A file or a pipe gets the text as
    it is. A refused write on standard output says where it failed (`report last >
    full-disk/r.txt`: one line, exit 2). `raw`: the stream itself, for this program's own
    control sequences (the progress line)."""

    def __init__(self, stream: Any, stdout: bool) -> None:
        self.raw = stream
        self._stdout = stdout
        try:
            self._terminal = bool(stream.isatty())
        except (AttributeError, ValueError, OSError):
            self._terminal = False

    def write(self, text: str) -> int:
        with self._refusals():
            return self.raw.write(shown(text, lines=True) if self._terminal else text)

    def flush(self) -> None:
        with self._refusals():
            self.raw.flush()

    @contextlib.contextmanager
    def _refusals(self) -> Iterator[None]:
        """A refused write on standard output as StdoutError (a reader that left stays
        BrokenPipeError; standard error's own refusals as they are)."""
        try:
            yield
        except BrokenPipeError:
            raise
        except OSError as e:
            if self._stdout:
                raise StdoutError(e.errno, e.strerror) from None
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def say(text: str, run_id: str) -> None:
    """Print a run's verdict. A reader gone (`run … | head -1`) loses the text, not the
    exit code: the run was paid for and stored, and `set -o pipefail` reads its 3 or 4.
    A disk that refuses it (`run --json > full/out.json`) is exit 2, naming the run."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        stdout_to_null()
    except OSError as e:
        stdout_to_null()
        raise UserError(f"standard output: cannot write the summary ({e.strerror}); run "
                        f"{run_id} is stored: `swarm-tui report {run_id}`") from None
