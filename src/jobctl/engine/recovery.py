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
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from jobctl.domain.cluster import DaemonBeat
from jobctl.domain.crashes import CrashEvidence, crash_suspect
from jobctl.domain.models import Job, Orphan
from jobctl.engine import process, witness
from jobctl.engine.procfs import find_by_owner
from jobctl.engine.witness import Seen
from jobctl.errors import LeaseLost, NotFound
from jobctl.logfmt import logval
from jobctl.store.aio import AsyncStore

log = logging.getLogger("jobctl.recovery")


def _suspect(orphan: Orphan, found: dict[int, set[int]], seen: dict[str, Seen | None]) -> bool:
    """The poison rule's verdict (domain/crashes.py) on what recovery and the witness know."""
    evidence = CrashEvidence(survived=bool(found[orphan.job_id]))
    saw = seen.get(orphan.lease_owner)
    if saw is not None:
        job_id, gen = orphan.job_id, orphan.generation
        evidence = CrashEvidence(
            survived=evidence.survived,
            witnessed=True,
            alive_at_death=job_id in saw.alive,
            started=saw.started(job_id, gen),
            exit_code=saw.exit_code(job_id, gen),
        )
    return crash_suspect(evidence)


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
    # a zombie has exited (init may be slow to reap it, or not reap at all in a container)
    return {p for p in pids if _alive(p)}


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


def live_owners(daemons: Sequence[DaemonBeat], host: str, now: datetime) -> set[str]:
    """The daemons of this host, sharing the database (PostgreSQL), that are alive: seen
    within 3 lease TTLs and with their process still there. Their jobs are not orphans; a
    daemon killed and restarted at once has a fresh row but a dead pid, and is one."""
    return {d.owner for d in daemons if d.host == host and d.state(now) == "live" and _alive(d.pid)}


async def recover(
    store: AsyncStore,
    owner: str,
    grace: float,
    db: Path | None = None,
    reclaimed: list[Job] | None = None,
) -> int:
    """Stop survivors of this host's dead daemons and reclaim their jobs; return the count
    (and add each reclaimed job, as it is now, to ``reclaimed``).

    What was found is kept before anything is stopped (a crash during recovery must not
    turn a survivor into a suspect). An orphan is a *suspect* of the crash only when its
    command is gone now and, where the dead daemon's witness (``db``'s, see
    :mod:`jobctl.engine.witness`) saw it, had started, was gone at the instant of death
    and had not been seen to exit 0 (:func:`jobctl.domain.crashes.crash_suspect`; the
    poison rule, docs/guarantees.md).
    """
    host = owner_host(owner)
    daemons = await store.run(store.store.daemons)
    live = live_owners(daemons, host, store.clock.now())
    orphans = [
        o
        for o in await store.run(store.store.running)
        if owner_host(o.lease_owner) == host and o.lease_owner not in live | {owner}
    ]  # another host's lease expires and is reclaimed by the timer
    found = {o.job_id: survivors(o) for o in orphans}
    seen: dict[str, Seen | None] = {}
    for o in orphans:
        if db is not None and o.lease_owner not in seen:
            seen[o.lease_owner] = await asyncio.to_thread(witness.witnessed, db, o.lease_owner)
    marks = [(o.job_id, o.generation, _suspect(o, found, seen)) for o in orphans]
    if marks:
        await store.run(store.store.mark_crash_evidence, marks)
    if db is not None:
        witness.forget(db)
    count = 0
    for orphan in orphans:
        pids = found[orphan.job_id]
        if pids:
            log.warning("event=stopping_survivor job=%s pids=%s", orphan.job_id, sorted(pids))
            await stop_pids(pids, grace)
        job = await _reclaim(store, orphan, bool(pids))
        if job is not None:
            count += 1
            if reclaimed is not None:
                reclaimed.append(job)
    dead = {d.owner for d in daemons if d.host == host} - live - {owner}
    await stop_stranded(dead, grace)
    return count


async def stop_stranded(dead: set[str], grace: float) -> None:
    """Stop what still runs here for ``dead``, this host's dead daemons sharing the
    database (PostgreSQL), whose jobs are no longer theirs: another daemon reclaimed them
    once their leases expired (or they ended), so the orphan pass above did not see them.
    Found by the ``JOBCTL_LEASE_OWNER`` in their environment; only owners of this
    database's ``daemons`` table are looked for, so other databases' daemons on the host
    are never touched."""
    found = await asyncio.to_thread(find_by_owner, dead)
    by_job: dict[str, set[int]] = {}
    for pid, job_id in found.items():
        if _alive(pid):
            by_job.setdefault(job_id, set()).add(pid)
    for job_id, pids in sorted(by_job.items()):
        log.warning(
            "event=stopping_survivor job=%s pids=%s reason=reclaimed_elsewhere",
            job_id,
            sorted(pids),
        )
    if by_job:
        await stop_pids(set().union(*by_job.values()), grace)


async def _reclaim(store: AsyncStore, orphan: Orphan, survivor: bool) -> Job | None:
    """Reclaim one orphan: the job as it is now; None when another daemon sharing the
    database (PostgreSQL) took it first, its lease having expired meanwhile (nothing
    changed: the generation moved)."""
    try:
        job = await store.run(
            store.store.reclaim,
            orphan.job_id,
            orphan.generation,
            f"daemon {orphan.lease_owner} died while the job ran; reclaimed at start-up",
        )
    except (LeaseLost, NotFound) as exc:
        log.info("event=reclaim_skipped job=%s reason=%s", orphan.job_id, logval(exc))
        return None
    log.warning(
        "event=reclaimed job=%s gen=%s reason=daemon_restart survivor=%s status=%s%s",
        orphan.job_id,
        orphan.generation,
        "yes" if survivor else "no",
        job.status.value,
        f" dead_reason={job.dead_reason}" if job.dead_reason else "",
    )
    return job
