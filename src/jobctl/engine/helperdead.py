"""What the daemon reads in ``/proc`` once its spawn helper died (engine/spawnclient.py):
whether a child of the dead helper is still between its fork and its exec, which process
an unanswered request started, that process's cgroup, and the re-parented strays to reap.

Apart from the helper's protocol because none of it is the protocol: each is a look at
the system, run on a thread (``asyncio.to_thread``), that settles by evidence what a
dead helper can no longer tell.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from jobctl.engine import cgroup
from jobctl.engine import process as proc_mod

#: Seconds to wait, after a helper died, for its half-started children to exec or end.
SETTLE_LIMIT = 2.0


def _half_started(helper_pid: int, tag: str) -> list[int]:
    """Processes still running the dead helper's program (a fork not yet exec'd)."""
    want = [b"jobctl.engine.spawner", tag.encode()]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == helper_pid:
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if all(w in args for w in want):
            found.append(int(entry.name))
    return found


def settle(helper_pid: int, tag: str) -> None:
    """Wait (bounded) until no child of the dead helper is between fork and exec."""
    deadline = time.monotonic() + SETTLE_LIMIT
    while _half_started(helper_pid, tag) and time.monotonic() < deadline:
        time.sleep(0.005)


def cgroup_of(pid: int) -> str | None:
    """The directory of ``pid``'s cgroup (v2) below the attempts' directory, or None."""
    try:
        own = cgroup.own_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
    except OSError:
        return None
    mount = cgroup.mount_point()
    if mount is None or own is None or f"/{cgroup.SUBDIR}/" not in own:
        return None
    return f"{mount}{own}"


def find_command(markers: dict[str, str]) -> int | None:
    """The session leader among the processes carrying ``markers``, if any."""
    for pid in proc_mod.find_by_env(markers):
        with contextlib.suppress(OSError):
            if os.getsid(pid) == pid:
                return pid
    return None


def reap_strays(keep: set[int]) -> int:
    """waitpid every exited child of this process not in ``keep``; returns how many."""
    me, reaped = str(os.getpid()), 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in keep:
            continue
        try:
            fields = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == b"Z" and fields[1].decode() == me:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(entry.name), os.WNOHANG)
                reaped += 1
    return reaped


__all__ = ["SETTLE_LIMIT", "cgroup_of", "find_command", "reap_strays", "settle"]
