"""What ``/proc`` says about a process: its start time (with the pid, a name for good) and
whether its environment carries an attempt's markers (how a command's processes are found
without a cgroup, and after a crash). Re-exported by engine/process.py."""

from __future__ import annotations

import os
from pathlib import Path


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat).

    Together with the pid it names one process for good: a recycled pid has another
    start time, so a restarted daemon never signals an innocent process.
    """
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        stat = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(stat.rsplit(b")", 1)[1].split()[19])


def find_by_env(markers: dict[str, str]) -> list[int]:
    """Pids of processes whose start-up environment holds all ``markers``.

    The one way jobctl finds a command's processes without a cgroup: after a crash, a
    command whose pid was never recorded (the daemon died between spawning it and
    committing the pid) and children that left its group; when a live attempt is
    stopped, the children that left its group (engine/proctree.py).
    """
    wanted = [f"{k}={v}".encode() for k, v in markers.items()]
    own = os.getpid()
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and int(entry.name) != own and _marked(entry.name, wanted)
    ]


def find_by_owner(owners: set[str]) -> dict[int, str]:
    """Pids of processes whose start-up environment names one of ``owners`` as its
    ``JOBCTL_LEASE_OWNER``, each with its ``JOBCTL_JOB_ID`` (empty when missing)."""
    wanted = {f"JOBCTL_LEASE_OWNER={o}".encode() for o in owners}
    own = os.getpid()
    found: dict[int, str] = {}
    if not wanted:
        return found
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        env = _environ(entry.name)
        if wanted.intersection(env):
            ids = [e[len(b"JOBCTL_JOB_ID=") :] for e in env if e.startswith(b"JOBCTL_JOB_ID=")]
            found[int(entry.name)] = ids[0].decode(errors="replace") if ids else ""
    return found


def has_markers(pid: int, markers: dict[str, str]) -> bool:
    """Whether process ``pid`` carries all ``markers`` (see :func:`find_by_env`)."""
    return _marked(str(pid), [f"{k}={v}".encode() for k, v in markers.items()])


def _environ(pid: str) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def _marked(pid: str, wanted: list[bytes]) -> bool:
    env = _environ(pid)
    return bool(env) and all(w in env for w in wanted)
