"""Default locations of the database and the socket.

root: ``/var/lib/jobctl/jobctl.db`` and ``/run/jobctl/jobctl.sock`` (the system
service). Anyone else: ``$XDG_STATE_HOME/jobctl/jobctl.db`` (``~/.local/state``) and
``$XDG_RUNTIME_DIR/jobctl/jobctl.sock`` (``/run/user/UID``, or ``/tmp/jobctl-UID`` where
neither exists). ``JOBCTL_DB`` and ``JOBCTL_SOCKET`` override them.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Bytes a Unix socket's path may have (``sun_path`` holds 108 with the final NUL).
MAX_SOCKET_PATH = 107


def socket_path_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a Unix socket's (too long: bind and connect fail with
    "AF_UNIX path too long", which the daemon reported as an internal error), or None."""
    size = len(os.fsencode(str(path)))
    if size <= MAX_SOCKET_PATH:
        return None
    return (
        f"socket path {path} is {size} bytes; a Unix socket's path holds at most "
        f"{MAX_SOCKET_PATH}: choose a shorter one"
    )


def default_db() -> Path:
    if env := os.environ.get("JOBCTL_DB"):
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/jobctl/jobctl.db")
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "jobctl" / "jobctl.db"


def default_socket() -> Path:
    if env := os.environ.get("JOBCTL_SOCKET"):
        return Path(env)
    return standard_socket()


def standard_socket() -> Path:
    """Where this user's daemon listens unless told otherwise (JOBCTL_SOCKET aside)."""
    if os.geteuid() == 0:
        return Path("/run/jobctl/jobctl.sock")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime:
        candidate = Path(f"/run/user/{os.geteuid()}")
        if not candidate.is_dir():
            return Path(f"/tmp/jobctl-{os.geteuid()}") / "jobctl.sock"
        runtime = str(candidate)
    return Path(runtime) / "jobctl" / "jobctl.sock"
