"""Claims whose commit is in doubt: leased to this daemon in the store, unknown to it.

A claim is a write like any other. When the database goes away while it commits (a
PostgreSQL crash or restart, a network cut after ``COMMIT`` was sent), the claim may have
landed although the daemon was told it failed: its jobs are then ``running`` under this
daemon's lease, and nothing here runs them. No one else would either for a long time:
another daemon reclaims them only once the lease has run out, and this daemon never
reclaims its own leases (:meth:`jobctl.store.base.Store.reclaim_expired` spares them, as
its executor fences its live work itself), so a daemon alone on its database would leave
them ``running`` until it restarts.

So a claim that failed leaves the timer unsure, and its next tick, before it claims
again, reads the running jobs: those leased by this daemon under a generation its
executor does not hold (and with no process recorded: nothing of them was started) are
given back unstarted, using no attempt, and run again within seconds like any job that
could not start for now (a CI run caught it: a crash of the server during adds left
acknowledged jobs unrun for a whole lease).

The timer is the only claimer of the daemon's owner id and claims from one task, so
between the executor's snapshot and the store's read no claim of this daemon is in flight:
a lease it holds is never taken for an unknown one.
"""

from __future__ import annotations

import logging

from jobctl.domain.models import Claim
from jobctl.domain.states import JobStatus
from jobctl.engine.executor import Executor
from jobctl.errors import NotFound
from jobctl.store.aio import AsyncStore

log = logging.getLogger("jobctl.timer")
#: What the given-back attempt says (``show`` prints it).
WHY = "its claim's commit was in doubt (the database went away while it committed)"


async def release_unknown(store: AsyncStore, executor: Executor) -> list[int]:
    """Give back the jobs leased to ``executor``'s owner that it does not hold; their ids."""
    held = executor.held()  # first: see the module docstring
    owner = executor.owner
    running = await store.run(store.store.running)
    unknown = [
        o for o in running
        if o.lease_owner == owner and o.pid is None and (o.job_id, o.generation) not in held
    ]  # fmt: skip
    claims: list[Claim] = []
    for orphan in unknown:
        try:
            job = await store.run(store.store.get, orphan.job_id, False)
        except NotFound:  # purged meanwhile
            continue
        if (
            job.status is JobStatus.RUNNING
            and job.generation == orphan.generation
            and job.lease_owner == owner
            and job.lease_until is not None
        ):
            claims.append(Claim(job, job.attempt, job.generation, job.lease_until))
    ids = [c.job.id for c in claims]
    if claims:
        log.warning(
            "event=unknown_claims_given_back jobs=%s reason=%s",
            ",".join(map(str, ids)),
            "a claim's commit was in doubt",
        )
        executor.give_back_claims(claims, WHY)
    return ids
