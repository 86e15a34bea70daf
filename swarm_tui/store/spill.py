"""The spill journal: results the database could not take yet, fsynced beside it.

A full disk or an I/O error must not lose a paid answer. When a flush fails, the writer
appends the unsaved rows here (one JSON line each, fsynced) and keeps them in memory to
retry; after the database takes them the journal is emptied. Space for it is reserved
when the run starts (`posix_fallocate`), so a disk that fills up *after* that still takes
the journal; past the reservation, or where the database's folder refuses it, the
journal moves to a per-user folder under the system temp directory — used only while it
is this user's alone (0700, not a link): on a shared host another user could have made
it first. Opening the database imports every journal of a run no living process owns,
before anything is sent.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from swarm_tui.store.own_files import is_own_file, open_own, own_dir, why_not_own_dir
from swarm_tui.store.target import DbTarget, PgTarget

RESERVE_BYTES = 8 << 20  # ~1,500 answers of the team's size: many flush windows' worth
SUFFIX = ".spill.jsonl"


def _db_tag(db_target: DbTarget) -> str:
    if isinstance(db_target, PgTarget):
        return db_target.tag
    from swarm_tui.digest import sha256_hex

    return sha256_hex(str(db_target.resolve()).encode())[:10]


def _home(db_target: DbTarget) -> tuple[Path, str]:
    """The directory a journal goes to first, and its names' prefix: beside a database
    file; for a server, this host's directory for that server."""
    if isinstance(db_target, PgTarget):
        return db_target.local_dir(), "journal-"
    return db_target.parent, f"{db_target.name}-"


def _fallback_name() -> str:
    return f"swarm-tui-spill-{os.getuid()}"


def fallback_dir() -> Path:
    import tempfile  # brings shutil, bz2 and lzma: ~3 ms of a reading command's start

    return Path(tempfile.gettempdir()) / _fallback_name()


def _may_have_fallback() -> bool:
    """Whether any folder `tempfile.gettempdir()` can answer holds a fallback folder: its
    candidates (tempfile's own list, in its order) are a few stat calls where importing
    tempfile is not, and every open of the database asks (issue 34)."""
    if "tempfile" in sys.modules:  # already paid for (and its `tempdir` may be set): ask it
        return True
    candidates = [os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP")]
    candidates += ["/tmp", "/var/tmp", "/usr/tmp"]
    try:
        candidates.append(os.getcwd())
    except OSError:
        candidates.append(os.curdir)
    name = _fallback_name()
    return any(d and os.path.lexists(os.path.join(d, name)) for d in candidates)


def own_fallback_dir() -> Path:
    """The fallback folder, made 0700 if absent; OSError when what is there is not this
    user's alone: any user can make `/tmp/swarm-tui-spill-<uid>` first (or a link there)
    and then read, replace or delete the journals — or plant one that `resume` imports."""
    return own_dir(fallback_dir())


def journal_paths(db_target: DbTarget, run_id: str, owner: str | None = None) -> list[Path]:
    """Where a run's journal may be: beside the database first, then the fallback. A
    worker's (`owner`) is its own file: `<run>.<owner>`."""
    home, prefix = _home(db_target)
    name = run_id if owner is None else f"{run_id}.{owner}"
    return [home / f"{prefix}{name}{SUFFIX}",
            fallback_dir() / f"{_db_tag(db_target)}-{name}{SUFFIX}"]


def find_journals(db_target: DbTarget) -> dict[str, list[Path]]:
    """Every journal that belongs to this database, by run id (a run's workers' too)."""
    found: dict[str, list[Path]] = {}
    home, prefix = _home(db_target)
    folders = [(home, prefix)]
    if _may_have_fallback():
        folders.append((fallback_dir(), f"{_db_tag(db_target)}-"))
    for folder, start in folders:
        with contextlib.suppress(OSError):
            if folder != home and why_not_own_dir(os.lstat(folder)) is not None:
                continue  # nothing in another user's folder is ours to import
            for p in folder.iterdir():
                if (p.name.startswith(start) and p.name.endswith(SUFFIX)
                        and _own(p)):  # never one another user planted beside the db
                    run_id = p.name[len(start):-len(SUFFIX)].split(".", 1)[0]
                    found.setdefault(run_id, []).append(p)
    return found


def _own(path: Path) -> bool:
    try:
        return is_own_file(path.lstat())
    except OSError:
        return False


def read_journal(path: Path) -> list[tuple[str, list]]:
    """(table, row) entries; a torn last line (crash mid-append) is ignored."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    data = data.split(b"\0", 1)[0]  # the reserved, never-written tail is zeros
    out: list[tuple[str, list]] = []
    for line in data.splitlines():
        try:
            table, row = json.loads(line)
        except (ValueError, TypeError):
            continue
        out.append((table, row))
    return out


class SpillJournal:
    """Append-only, fsynced, with space reserved up front. Not thread-safe (one writer)."""

    def __init__(self, db_target: DbTarget, run_id: str, owner: str | None = None) -> None:
        self.candidates = journal_paths(db_target, run_id, owner)
        self.path: Path | None = None
        self._fd = -1
        self._offset = 0
        self.rows = 0
        self.error: str | None = None

    def reserve(self) -> None:
        """Create the journal beside the database and reserve its space (best effort)."""
        with contextlib.suppress(OSError):
            self._move_to(self.candidates[0])
            with contextlib.suppress(OSError):
                os.posix_fallocate(self._fd, 0, RESERVE_BYTES)

    def append(self, entries: Iterable[tuple[str, tuple]]) -> bool:
        """Write and fsync the entries; False (and `error`) when no location took them."""
        data = b"".join(json.dumps([t, list(r)], separators=(",", ":")).encode() + b"\n"
                        for t, r in entries)
        if not data:
            return True
        tried: list[str] = []
        for path in self.candidates:
            try:
                if self.path != path or self._fd < 0:
                    self._move_to(path)
                n = os.pwrite(self._fd, data, self._offset)
                if n != len(data):
                    raise OSError(28, "short write")
                os.fsync(self._fd)
            except OSError as e:
                tried.append(f"{path}: {e.strerror or e}")
                continue
            self._offset += len(data)
            self.rows += data.count(b"\n")
            self.error = None
            return True
        self.error = "; ".join(tried)
        return False

    def _move_to(self, path: Path) -> None:
        """Open the journal at `path`, carrying over what an earlier location holds."""
        if path != self.candidates[0]:
            own_fallback_dir()
        fd = open_own(path, os.O_RDWR | os.O_CREAT)
        try:
            kept = os.pread(self._fd, self._offset, 0) if self._fd >= 0 and self._offset else b""
            if kept:
                if os.pwrite(fd, kept, 0) != len(kept):
                    raise OSError(28, "short write")
                os.fsync(fd)
        except OSError:
            os.close(fd)
            raise
        old, old_fd = self.path, self._fd
        self._fd, self.path, self._offset = fd, path, len(kept)
        if old_fd >= 0:
            os.close(old_fd)
        if old is not None and old != path:
            with contextlib.suppress(OSError):
                old.unlink()

    def clear(self) -> None:
        """The database took everything journaled: empty the file (keep its reservation)."""
        if self._fd < 0 or self._offset == 0:
            return
        with contextlib.suppress(OSError):
            os.pwrite(self._fd, b"\0" * self._offset, 0)
            os.fsync(self._fd)
            self._offset = 0
            self.rows = 0

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1

    def discard(self) -> None:
        """The run ended with everything stored: remove the (empty) journal."""
        self.close()
        if self.path is not None and self.rows == 0:
            with contextlib.suppress(OSError):
                self.path.unlink()
