"""Applying a job's resource limits (domain/resources.py) where its command starts.

``nice`` is set on the command's process while it waits at its gate (before it runs a
single instruction of the job); ``memory.max`` and ``cpu.max`` are written to the
attempt's cgroup before the command is moved into it. (The spawn helper with the
launcher's library needs no gate: the command is born in its cgroup by ``clone3`` and
its niceness is set in the child before the drop, engine/spawner.py.) A limit this
daemon cannot apply is never skipped: the attempt fails at once with the reason (exit
code 126, like a command that cannot be executed), and the API refuses such jobs at
enqueue already.
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import Future

from jobctl.domain.resources import Resources
from jobctl.engine import cgroup
from jobctl.engine.cgroup import Cgroup, Cgroups

FLAGS = {"memory": "--memory-max", "cpu": "--cpu-quota"}


class StartRefused(Exception):
    """The job asks for a limit this daemon cannot apply: it must not run without it."""


def refusal(res: Resources | None, cgroups: Cgroups | None, euid: int) -> str | None:
    """Why this daemon cannot apply ``res``; None when it can."""
    if not res:
        return None
    if res.nice is not None and res.nice < 0 and euid != 0:
        return f"--nice {res.nice} needs a root daemon (a user may only lower priority)"
    for name in sorted(res.controllers()):
        if cgroups is None:
            return (f"{FLAGS[name]} needs a cgroup per attempt with the cgroup v2 {name} "
                    "controller; this daemon makes no cgroups (job_cgroups off, or no "
                    "writable cgroup v2)")  # fmt: skip
        if name not in cgroups.controllers:
            return (f"{FLAGS[name]} needs the cgroup v2 {name} controller, which this "
                    f"daemon cannot enable for {cgroups.base} (see docs/operations.md, "
                    "Resource limits)")  # fmt: skip
    return None


def check(res: Resources | None, cgroups: Cgroups | None) -> None:
    if not res:  # most jobs give none: no euid asked for at each start (issue 17)
        return
    why = refusal(res, cgroups, os.geteuid())
    if why is not None:
        raise StartRefused(why)


def needs_gate(res: Resources | None) -> bool:
    """Whether the command must wait at a gate until its limits are set (nice)."""
    return res is not None and res.nice is not None


def limit_cgroup(cg: Cgroup | None, res: Resources | None) -> None:
    """Write ``res``'s cgroup limits into ``cg`` (the command is not in it yet)."""
    if cg is None or not res or not res.cgroup_files():
        return
    try:
        cg.limit(res.cgroup_files())
    except OSError as exc:
        raise StartRefused(f"cannot set the attempt's limits in {cg.path}: {exc}") from exc


def release(cg: Cgroup | None, pid: int, gate: int, res: Resources | None) -> Future[bool] | None:
    """Set the command's niceness, then move it into ``cg`` and open its gate (the move on
    a thread: :func:`cgroup.enter`); without a cgroup the gate opens here. A niceness
    that cannot be set stops the command before it ran (raises StartRefused)."""
    if res is not None and res.nice is not None:
        try:
            os.setpriority(os.PRIO_PROCESS, pid, res.nice)
        except OSError as exc:
            os.killpg(pid, signal.SIGKILL)
            os.close(gate)
            raise StartRefused(f"cannot set nice {res.nice}: {exc}") from exc
    if cg is not None:
        return cgroup.enter(cg, pid, gate)
    cgroup.open_gate(gate)
    return None
