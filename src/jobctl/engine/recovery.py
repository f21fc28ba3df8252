"""Start-up recovery: make sure no command of a dead daemon still runs, then reclaim.

A daemon that was killed (``kill -9``, OOM, power loss) leaves its jobs ``running``
with leases it can no longer heartbeat, and possibly their commands still alive
(they run in their own sessions, so they outlive the daemon). Before such a job may
run again its survivors are stopped, so one host never runs two copies of a job:
first by the recorded pid (checked against the recorded process start time, so a
recycled pid is never signalled), then by searching ``/proc`` for processes whose
environment carries the job's id and the dead daemon's lease owner (this finds a
command whose pid was never committed, and children that left the group).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from jobctl.domain.models import Orphan
from jobctl.engine import process
from jobctl.store.aio import AsyncStore

log = logging.getLogger("jobctl.recovery")


def owner_host(owner: str) -> str:
    return owner.split(":", 1)[0]


def survivors(orphan: Orphan) -> set[int]:
    """Pids of live processes that belong to ``orphan``'s attempt."""
    pids: set[int] = set()
    if (
        orphan.pid is not None
        and orphan.pid_start is not None
        and (process.process_start_time(orphan.pid) == orphan.pid_start)
    ):
        pids.add(orphan.pid)
    # Any generation of the dead daemon's: an earlier attempt's helper is a copy too.
    pids.update(process.find_by_env(process.attempt_markers(orphan.job_id, orphan.lease_owner)))
    pids.discard(os.getpid())
    return pids


async def stop_pids(pids: set[int], grace: float) -> None:
    """SIGTERM each pid's process group, SIGKILL what is left after ``grace``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.killpg(os.getpgid(pid), sig)
            except (ProcessLookupError, PermissionError):
                continue
        deadline = asyncio.get_running_loop().time() + (grace if sig == signal.SIGTERM else 5)
        while any(_alive(p) for p in pids) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)  # not our children: no exit event exists to wait on
        if not any(_alive(p) for p in pids):
            return


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def recover(store: AsyncStore, owner: str, grace: float) -> int:
    """Stop survivors of this host's dead daemons and reclaim their jobs; return the count."""
    host = owner_host(owner)
    count = 0
    for orphan in await store.run(store.store.running):
        if owner_host(orphan.lease_owner) != host or orphan.lease_owner == owner:
            continue  # another host's lease: it expires and is reclaimed by the timer
        pids = survivors(orphan)
        if pids:
            log.warning("event=stopping_survivor job=%s pids=%s", orphan.job_id, sorted(pids))
            await stop_pids(pids, grace)
        await store.run(
            store.store.reclaim,
            orphan.job_id,
            orphan.generation,
            f"daemon {orphan.lease_owner} died while the job ran; reclaimed at start-up",
        )
        log.warning(
            "event=reclaimed job=%s gen=%s reason=daemon_restart", orphan.job_id, orphan.generation
        )
        count += 1
    return count
