"""Stopping an attempt's whole process tree: its group, and what left the group.

Every way a live attempt is stopped goes through :func:`stop` (a cancel, its timeout, a
lost lease, the daemon's shutdown): SIGTERM to the command's process group and to every
other process of its tree, a wait of up to the grace period for all of them, then
SIGKILL to whatever is left. The tree is the attempt's cgroup where the daemon made one
(engine/cgroup.py: exact, whatever the processes did with sessions and groups), else
the processes whose environment carries the attempt's markers (``JOBCTL_JOB_ID``,
``JOBCTL_GENERATION``, ``JOBCTL_LEASE_OWNER``: :func:`process.find_by_env`, the same
scan crash recovery uses), found by a ``/proc`` scan on a thread. Each found process is
signalled through a pidfd after its environment was checked again, so a pid recycled
between the scan and the signal is never hit.

When an attempt ends on its own, :func:`end` kills what is left in its cgroup and
removes the cgroup. Without a cgroup only the group is killed then (by the executor):
a ``/proc`` scan per finished job would cost more than starting the job.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from jobctl.engine import process
from jobctl.engine.cgroup import Cgroup

log = logging.getLogger("jobctl.executor")
_POLL = 0.02  # seconds between looks at a tree that is not our children (no exit event)
#: How long :func:`end` waits for a killed cgroup to empty before leaving it behind.
END_WAIT = 5.0


async def stop(run: process.Running, grace: float) -> None:
    """SIGTERM the attempt's group and tree, SIGKILL what outlives ``grace``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    process.signal_group(run.proc.pid, signal.SIGTERM)
    cg = await run.tree_cgroup()
    await signal_tree(run, cg, signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.shield(run.exited), max(0.0, deadline - loop.time()))
    except TimeoutError:
        process.signal_group(run.proc.pid, signal.SIGKILL)
    await _wait_tree(run, cg, deadline)
    await kill_tree(run, cg)
    await run.exited


async def end(run: process.Running) -> None:
    """The attempt ended: kill what is left in its cgroup, then remove the cgroup
    (unless the spawn helper removed it already, found empty at the exit, or kept it
    empty for its pool: then the handle is fenced and the cgroup handed back, to be
    used again unless a ``cgroup.kill`` was written in it: see ``Cgroup.killed``)."""
    if getattr(run.proc, "cgroup_removed", False):
        return
    proc: Any = run.proc  # spawnclient.Started (the helper's), or a Popen
    release: Callable[[bool], None] | None = getattr(proc, "release", None)
    if release is not None:
        reuse = run.cgroup is not None and not run.cgroup.killed
        if run.cgroup is not None:
            run.cgroup.hand_back()  # before the helper may start another attempt in it
        proc.release = None  # once: a second hand-back could free the next attempt's
        release(reuse)
        return
    cg = await run.tree_cgroup()
    if cg is None:
        return
    if cg.populated():
        cg.kill()
        await _until(lambda: not cg.populated(), asyncio.get_running_loop().time() + END_WAIT)
    # rmdir in cgroupfs waits on the kernel's cgroup lock (ms under load): off the loop
    if not await asyncio.get_running_loop().run_in_executor(None, cg.remove):
        log.warning("event=cgroup_left job=%s path=%s", run.claim.job.id, cg.path)


async def signal_tree(run: process.Running, cg: Cgroup | None, sig: int) -> None:
    """Send ``sig`` to every process of the attempt's tree (``cg``: its cgroup, if any)."""
    if cg is not None:
        cg.signal(sig)
        return
    await asyncio.get_running_loop().run_in_executor(None, signal_marked, run.markers, sig)


async def kill_tree(run: process.Running, cg: Cgroup | None) -> None:
    """SIGKILL every process of the tree (by the markers: until a scan finds none left,
    so a child forked during a scan is caught by the next one)."""
    if cg is not None:
        cg.kill()
        return
    loop = asyncio.get_running_loop()
    for _ in range(5):
        if not await loop.run_in_executor(None, signal_marked, run.markers, signal.SIGKILL):
            return


async def _wait_tree(run: process.Running, cg: Cgroup | None, deadline: float) -> None:
    """Wait until the tree is empty or ``deadline`` (loop time) passes."""
    if cg is not None:
        await _until(lambda: not cg.populated(), deadline)
        return
    loop = asyncio.get_running_loop()
    pids = await loop.run_in_executor(None, process.find_by_env, run.markers)
    await _until(lambda: not any(_alive(p) for p in pids), deadline)


async def _until(done: Callable[[], bool], deadline: float) -> bool:
    loop = asyncio.get_running_loop()
    while not done():
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_POLL)
    return True


def signal_marked(markers: dict[str, str], sig: int) -> int:
    """Send ``sig`` to every process carrying ``markers``; returns how many got it.

    Each is opened as a pidfd and checked again before the signal: the pidfd pins the
    process, so a pid reused since the scan is never signalled.
    """
    count = 0
    for pid in process.find_by_env(markers):
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if _alive(pid) and process.has_markers(pid, markers):
                signal.pidfd_send_signal(fd, sig)
                count += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return count


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie has ended: only its parent's wait is due)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False
