"""One daemon per database: the exclusive lock a store holds for its life.

A path is not what identifies a database: a symlink to the file or to its directory, a
relative path, a hard link or a bind mount all reach the same file under another name, and
a second daemon that got in that way would "recover" the first one's live jobs (stop them
as orphans, run them again). So two locks are taken, both ``flock``s (freed by the kernel
even after ``kill -9``):

1. ``<resolved path>.lock``, next to the file the path resolves to (symlinks, ``..`` and
   relative paths followed). It holds the holder's pid for the message a refused daemon
   prints, and it is taken first, so two stores on one spelling never touch the database
   file itself (see 2).
2. The database file itself, which is the same inode whatever the name: this is what
   refuses a hard link or a bind mount. SQLite locks the file with POSIX ``fcntl`` locks;
   on Linux ``flock`` locks are independent of those (not on NFS, where SQLite's WAL does
   not work anyway). Closing *any* descriptor of the file drops every POSIX lock the
   process holds on it, SQLite's included, so the descriptor is closed only after the
   store's connections, and a descriptor whose lock was refused is kept open rather than
   closed under a live store of the same process.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from jobctl.errors import DaemonLocked

#: Descriptors of database files whose lock was refused (see the module docstring).
_REFUSED: list[int] = []


class DbLock:
    """Both locks on the database at ``path``; :meth:`release` after closing the store."""

    def __init__(self, path: str) -> None:
        real = os.path.realpath(path)
        Path(real).parent.mkdir(parents=True, exist_ok=True)
        self._pid_fd: int | None = _lock_file(real + ".lock", path)
        try:
            self._db_fd: int | None = _lock_database(real, path)
        except BaseException:
            os.close(self._pid_fd)
            raise
        os.ftruncate(self._pid_fd, 0)
        os.write(self._pid_fd, f"jobctl daemon pid {os.getpid()}\n".encode())

    def release(self) -> None:
        for fd in (self._db_fd, self._pid_fd):
            if fd is not None:
                os.close(fd)
        self._db_fd = self._pid_fd = None


def _lock_file(lock_path: str, shown: str) -> int:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)  # the lock file is not the database: closing it drops nothing
        holder = Path(lock_path).read_text().strip() or "another process"
        raise _in_use(shown, holder) from None
    return fd


def _lock_database(real: str, shown: str) -> int:
    # Created here when missing: SQLite takes an empty file for an empty database.
    fd = os.open(real, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)  # private (files.py)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        _REFUSED.append(fd)
        pid = _flock_holder(fd)
        holder = f"jobctl daemon pid {pid}" if pid else "another process"
        raise _in_use(shown, f"{holder} (the same file under another name)") from None
    return fd


def _in_use(path: str, holder: str) -> DaemonLocked:
    return DaemonLocked(f"database {path} is in use by {holder}; stop that daemon first", path=path)


def _flock_holder(fd: int) -> int | None:
    """The pid holding a ``flock`` on the file of ``fd``, from ``/proc/locks``, if shown."""
    st = os.fstat(fd)
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split()
        # e.g. "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; "->" marks waiters
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == ident:
            return int(fields[4]) if fields[4].isdigit() else None
    return None
