"""Pull workers over the API (``/v1/leases``, docs/workers.md): lease, heartbeat,
complete, fail, release.

A worker acts as its uid (the socket's peer credentials). It leases the due jobs of
worker queues it may work: its own jobs, and every owner's where it is an admin or the
queue's ``workers`` list names it or one of its groups. Every later call carries the
lease's ``generation``: a stale one is 409 ``LeaseLost`` and changes nothing (the store's
compare-and-set), except that a complete (or fail) repeated with the generation and
outcome already recorded answers 200 again, so a worker may retry a call whose answer it
lost. Only the worker (uid) that held a lease, the job's owner and admins see these
routes' jobs; anyone else gets 404, as for a job that does not exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, JsonValue, StrictBool, StrictFloat

from jobctl.access import user_name
from jobctl.api.app import Context, Ctx, JobIdPath, Who
from jobctl.api.leasebatch import (
    FinishList,
    attempt_result,
    completed,
    failed,
    finish_batch,
    recorded,
)
from jobctl.api.policy import Caller
from jobctl.api.schemas import NUMBER, STRICT, QueueName, job_out
from jobctl.api.worksignal import Hangup
from jobctl.domain import limits
from jobctl.domain import workers as wk
from jobctl.domain.clock import iso
from jobctl.domain.models import AttemptResult, Claim, Job
from jobctl.domain.states import JobStatus, Outcome
from jobctl.errors import LeaseLost, NotVisible

router = APIRouter(prefix="/v1/leases")
log = logging.getLogger("jobctl.api")
#: The text of a failure the attempt keeps (a traceback's tail is the part that says why).
MAX_ERROR = 16 * 1024

Ttl = Annotated[StrictFloat, Field(ge=wk.MIN_LEASE_TTL, le=wk.MAX_LEASE_TTL), NUMBER]
#: A lease's generation (bounded like ids: exactly representable in every JSON reader).
Generation = Annotated[int, Field(ge=1, le=limits.MAX_ID), NUMBER]


class LeaseIn(BaseModel):
    """Ask for up to ``max`` jobs of these worker queues, waiting up to ``wait`` seconds;
    first record the outcomes in ``finish`` (``max`` 0: only those, no lease)."""

    model_config = STRICT
    queues: Annotated[list[QueueName], Field(min_length=1, max_length=32)]
    max: Annotated[int, Field(ge=0, le=wk.MAX_LEASES), NUMBER] = 1
    wait: Annotated[StrictFloat, Field(ge=0, le=wk.MAX_WAIT), NUMBER] = 0
    lease_ttl: Ttl = wk.DEFAULT_LEASE_TTL
    #: Outcomes of jobs leased before, each fenced by its generation (api/leasebatch.py).
    finish: FinishList = []


class HeartbeatIn(BaseModel):
    model_config = STRICT
    generation: Generation
    lease_ttl: Ttl = wk.DEFAULT_LEASE_TTL


class CompleteIn(BaseModel):
    model_config = STRICT
    generation: Generation
    #: Kept (as JSON, its first 4 KiB) as the attempt's output tail.
    result: JsonValue = None


class FailIn(BaseModel):
    model_config = STRICT
    generation: Generation
    error: Annotated[str, Field(max_length=MAX_ERROR)]
    #: False: dead at once (``non_retryable``), whatever attempts are left.
    retryable: StrictBool = True


#: The longest a release may hold its job back (a day: a later time is a new job's run_at).
MAX_RELEASE_DELAY = 86400.0


class ReleaseIn(BaseModel):
    """Give a leased job back unrun: due again after ``delay`` seconds (default at once)."""

    model_config = STRICT
    generation: Generation
    delay: Annotated[StrictFloat, Field(ge=0, le=MAX_RELEASE_DELAY), NUMBER] = 0


def lessee_of(who: Caller) -> wk.Lessee:
    """The caller as a lessee: uid, admin, and groups (primary and supplementary)."""
    gids = {who.gid}
    name = user_name(who.uid)
    if name is not None:
        with contextlib.suppress(OSError):  # a user the group database cannot list
            gids.update(os.getgrouplist(name, who.gid))
    return wk.Lessee(who.uid, who.admin, frozenset(gids))


def lease_out(c: Claim, ttl: float) -> dict[str, Any]:
    job = c.job
    return {
        "id": job.id,
        "key": job.key,
        "queue": job.spec.queue,
        "owner_uid": job.spec.owner_uid,
        "payload": None if job.spec.payload is None else _json(job.spec.payload),
        "attempt": c.attempt,
        "max_attempts": job.spec.max_attempts,
        "generation": c.generation,
        "lease_until": iso(c.lease_until),
        "heartbeat_every": round(ttl / 3, 3),
    }


def _json(text: str) -> Any:
    return json.loads(text)


@router.post("", summary="Lease due jobs of worker queues (long-poll); finish others first")
async def lease(body: LeaseIn, ctx: Ctx, who: Who, request: Request) -> dict[str, Any]:
    hangup: Hangup | None = getattr(request.state, "hangup", None)
    if hangup is not None:
        hangup.answers = True  # a worker that hangs up to stop still reads this answer
    if not body.finish:
        return {"leases": await _granted(ctx, body, await _lease(body, ctx, who, hangup), hangup)}
    results = [attempt_result(i) for i in body.finish]  # a bad result: 422, nothing done
    # at once: both writes share the store's group commit (one commit, not two, per
    # round trip); the worker asks only for the slots it has free either way
    (finished, target), claims = await asyncio.gather(
        finish_batch(ctx, who, body.finish, results), _lease(body, ctx, who, hangup)
    )
    request.state.audit_target = target
    return {"leases": await _granted(ctx, body, claims, hangup), "finished": finished}


async def _lease(body: LeaseIn, ctx: Context, who: Caller, hangup: Hangup | None) -> list[Claim]:
    """Up to ``body.max`` claims, once there are some or ``body.wait`` has passed; none
    once the worker has hung up (its wait ends then too)."""
    if not body.max:
        return []
    lessee = lessee_of(who)
    loop_time = asyncio.get_running_loop().time  # how long to wait: not a stored time
    deadline = loop_time() + float(body.wait)
    signal = ctx.hooks.work
    while hangup is None or not hangup.seen:
        seen = signal.seq
        claims = await ctx.store.run(
            ctx.st.lease, body.queues, lessee, body.max, float(body.lease_ttl)
        )
        left = deadline - loop_time()
        if claims:
            # the timer must look at these leases when they run out (the reaper's turn)
            ctx.hooks.due(min(c.lease_until for c in claims))
        if claims or left <= 0:
            return claims
        ctx.metrics.lease_waits.inc()
        try:
            await signal.wait(seen, left, hangup)
        finally:
            ctx.metrics.lease_waits.dec()
    return []


async def _granted(
    ctx: Context, body: LeaseIn, claims: list[Claim], hangup: Hangup | None
) -> list[dict[str, Any]]:
    """The leases to answer; if the worker hung up while they were claimed, none: they
    are released here (a killed worker would never read them; a stopping one would
    only release them itself)."""
    if claims and hangup is not None and hangup.seen:
        await _release_unsent(ctx, claims)
        return []
    return [lease_out(c, float(body.lease_ttl)) for c in claims]


async def _release_unsent(ctx: Context, claims: list[Claim]) -> None:
    """End each claim's attempt ``interrupted`` (no attempt used, due again at once), as
    the worker's own ``release`` would."""
    result = AttemptResult(Outcome.INTERRUPTED, error="released: the worker hung up")
    done = await asyncio.gather(
        *(ctx.store.finish(c.job.id, c.generation, result) for c in claims),
        return_exceptions=True,
    )
    for claim, got in zip(claims, done, strict=True):
        if isinstance(got, BaseException):  # cancelled meanwhile, or the store failed:
            log.warning(  # the lease lapses at its lease_until
                "event=release_failed job=%s gen=%s error=%r", claim.job.id, claim.generation, got
            )
            continue
        if got.status is JobStatus.SCHEDULED:
            ctx.hooks.due(got.run_at)  # due at once: the timer wakes the other workers
        ctx.metrics.finished_as(claim.job.spec.queue, result, got.status, got.dead_reason)
    log.info("event=lease_hangup released=%s", ",".join(str(c.job.id) for c in claims))


async def _held(ctx: Context, who: Caller, job_id: int) -> Job:
    """The job, if the caller holds or held its lease, owns it or is an admin."""
    job = await ctx.store.run(ctx.st.get, job_id, True)
    mine = wk.worker_owner(who.uid)
    if not (
        who.sees(job.spec.owner_uid)
        or job.lease_owner == mine
        or any(a.lease_owner == mine for a in job.attempts)
    ):
        raise who.deny(NotVisible(f"no job {job_id}", job_id=job_id))
    return job


@router.post("/{job_id}/heartbeat", summary="Extend a lease (stale generation: 409)")
async def heartbeat(job_id: JobIdPath, body: HeartbeatIn, ctx: Ctx, who: Who) -> dict[str, Any]:
    await _held(ctx, who, job_id)
    ttl = float(body.lease_ttl)
    lost = await ctx.store.run(ctx.st.heartbeat, [(job_id, body.generation)], ttl)
    if lost:
        raise _lost(job_id, body.generation)
    until = ctx.store.clock.now().timestamp() + ttl
    return {"id": job_id, "generation": body.generation, "lease_until_epoch": until}


@router.post("/{job_id}/complete", summary="Complete a leased job (stale generation: 409)")
async def complete(job_id: JobIdPath, body: CompleteIn, ctx: Ctx, who: Who) -> dict[str, Any]:
    return await _finish(ctx, who, job_id, body.generation, completed(body.result))


@router.post("/{job_id}/fail", summary="Fail a leased job: retried or dead (stale: 409)")
async def fail(job_id: JobIdPath, body: FailIn, ctx: Ctx, who: Who) -> dict[str, Any]:
    result = failed(body.error, body.retryable)
    return await _finish(ctx, who, job_id, body.generation, result)


@router.post("/{job_id}/release", summary="Give a leased job back unrun (no attempt used)")
async def release(job_id: JobIdPath, body: ReleaseIn, ctx: Ctx, who: Who) -> dict[str, Any]:
    """Why: a worker stopping (SIGTERM) with leases it has not started should hand them
    back at once, not let them lapse at ``lease_until`` as a ``lease_expired`` attempt
    that uses the budget. The attempt ends ``interrupted`` (free, as a daemon's shutdown)
    and the job is due again after ``delay``; a stale generation is 409 ``lease_lost``."""
    delay = float(body.delay)
    result = AttemptResult(
        Outcome.INTERRUPTED, error="released by the worker", retry_after=delay or None
    )
    return await _finish(ctx, who, job_id, body.generation, result)


async def _finish(
    ctx: Context, who: Caller, job_id: int, generation: int, result: AttemptResult
) -> dict[str, Any]:
    await _held(ctx, who, job_id)
    try:
        job = await ctx.store.run(ctx.st.finish, job_id, generation, result)
    except LeaseLost:
        job = await ctx.store.run(ctx.st.get, job_id, True)
        if not recorded(job, generation, result.outcome):
            raise _lost(job_id, generation) from None
        return job_out(job) | {"repeated": True}
    if job.status is JobStatus.SCHEDULED:
        ctx.hooks.due(job.run_at)  # the retry's time: the timer wakes the waiting workers
    ctx.metrics.job_finished(job.spec.queue, result, job)
    return job_out(job) | {"repeated": False}


def _lost(job_id: int, generation: int) -> LeaseLost:
    return LeaseLost(
        f"job {job_id}: lease lost (generation {generation} is stale)",
        job_id=job_id,
        generation=generation,
    )


__all__ = ["router"]
