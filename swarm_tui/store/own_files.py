"""Folders and files this program makes beside a database or under the shared temp
directory — locks and journals — used only when they are this user's alone. On a bastion
another user can make the folder first (`/tmp/runs.db-locks`) and plant a link where a
lock or a journal will be: a process that followed it truncated and wrote the link's
target (any file of the engineer's), or imported a planted journal as paid results."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def why_not_own_dir(st: os.stat_result) -> str | None:
    """Why a folder (its lstat) is not this user's alone, or None."""
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder (a link or a file)"
    if st.st_uid != os.getuid():
        return f"owned by uid {st.st_uid}"
    if st.st_mode & 0o077:
        return f"mode {st.st_mode & 0o777:o}, open to others"
    return None


def own_dir(path: Path, parents: bool = False) -> Path:
    """`path`, made 0700 if absent; OSError when what is there is not this user's alone
    (as tmux checks /tmp/tmux-<uid>)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        if not parents:
            raise
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    why = why_not_own_dir(os.lstat(path))
    if why is not None:
        raise OSError(errno.EPERM, f"{why} — not used")
    return path


def is_own_file(st: os.stat_result) -> bool:
    """A regular file of this user's with no second name (a hard link to another file)."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_nlink == 1


def open_own(path: Path, flags: int) -> int:
    """os.open(path, flags) for a file of this user's: never through a link, never a
    file someone else made or linked there. OSError says which."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(errno.EPERM, "a link — not followed") from None
        raise
    st = os.fstat(fd)
    if not is_own_file(st):
        os.close(fd)
        raise OSError(errno.EPERM, "not a file of this user's alone — not used")
    os.set_blocking(fd, True)
    return fd
