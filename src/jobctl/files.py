"""The daemon's own files: a private state directory (0700) and private files (0600).

Whatever the umask the daemon was started with, it makes its directories 0700 and its
files 0600 itself (explicit modes, and the daemon runs with umask 077 as well), opens
the files it creates with ``O_NOFOLLOW``, and refuses a directory of its own that is a
symbolic link. Files and directories an earlier run left more open than that are
tightened at start, with a log line each. SQLite creates the WAL and shared-memory
files with the database file's own mode, so a 0600 database keeps them 0600 too.

The state directory (the database's directory) is tightened only when it holds
nothing but the daemon's files: a database put straight into a shared directory
(``/var/lib``, a home directory) must not make the daemon lock others out of it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

from jobctl.errors import UnsafePath
from jobctl.logfmt import logval

log = logging.getLogger("jobctl.files")
DIR_MODE = 0o700
FILE_MODE = 0o600
#: The daemon's process umask: whatever else it creates is private too.
DAEMON_UMASK = 0o077


def ensure_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) mode 0700; refuse a symlink or a file."""
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass
    except FileNotFoundError:
        ensure_dir(path.parent)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, DIR_MODE)
    _real_dir(path)


def _real_dir(path: Path) -> os.stat_result:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(
            f"refusing {path}: it is a symbolic link (the daemon's directories must be "
            "real directories)",
            path=str(path),
        )
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"refusing {path}: not a directory", path=str(path))
    return st


def open_private(path: Path, flags: int) -> int:
    """Open ``path``, creating it 0600; a symbolic link there is refused (``ELOOP``)."""
    return os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)


def tighten(path: Path, mode: int) -> bool:
    """Take away every permission bit beyond ``mode``; True if it changed anything.

    A missing path is fine; a symbolic link is refused (it would chmod its target).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"refusing {path}: it is a symbolic link", path=str(path))
    old = stat.S_IMODE(st.st_mode)
    if not old & ~mode & 0o777:
        return False
    os.chmod(path, old & ~(0o777 & ~mode), follow_symlinks=False)
    log.warning(
        "event=permissions_tightened path=%s from=%04o to=%04o",
        logval(str(path)),
        old,
        old & ~(0o777 & ~mode),
    )
    return True


def own_names(db: Path) -> set[str]:
    """The names the daemon keeps beside its database."""
    name = db.name
    return {name, *(name + s for s in ("-wal", "-shm", "-journal", ".lock", ".witness")), "logs"}


def prepare_state(db: Path, log_dir: Path) -> None:
    """At start: the state directory, the database's files and the log tree, private.

    Creates what is missing (the database file too, 0600, so SQLite never creates it
    with its own 0644), tightens what an earlier run or another umask left open.
    """
    db = Path(os.path.realpath(db))  # a symlinked database is the admin's own choice
    state = db.parent
    ensure_dir(state)
    _tighten_state_dir(state, own_names(db))
    with contextlib.suppress(FileExistsError):  # 0600 before SQLite first opens it
        os.close(open_private(db, os.O_RDWR | os.O_EXCL))
    witness = db.name + ".witness"  # the crash witness's directory (engine/witness.py)
    for name in own_names(db) - {"logs", witness}:
        tighten(state / name, FILE_MODE)
    tighten(state / witness, DIR_MODE)
    ensure_dir(log_dir)
    tighten(log_dir, DIR_MODE)
    with os.scandir(log_dir) as entries:  # one directory per 1,000 jobs; files stay
        for entry in entries:  # behind them (a 0700 directory is closed to others)
            if entry.is_dir(follow_symlinks=False):
                tighten(Path(entry.path), DIR_MODE)


def _tighten_state_dir(state: Path, ours: set[str]) -> None:
    st = _real_dir(state)
    if not stat.S_IMODE(st.st_mode) & 0o077:
        return
    others = sorted(set(os.listdir(state)) - ours)
    if st.st_uid != os.geteuid() or others:
        log.warning(
            "event=state_dir_open path=%s mode=%04o reason=%s",
            logval(str(state)),
            stat.S_IMODE(st.st_mode),
            logval("not the daemon's own directory: left as it is; its files are 0600"),
        )
        return
    tighten(state, DIR_MODE)
