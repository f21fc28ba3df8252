"""Dead-letter routes (``/v1/dlq``): list with filters, show, gated replay, purge."""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query

from jobctl.api import pages
from jobctl.api.app import AllUsers, Ctx, JobIdPath, ListLimit, Who, job_detail, visible_job
from jobctl.api.schemas import TIME_SCHEMA, ReplayIn
from jobctl.api.views import job_out
from jobctl.api.wiretypes import since_time
from jobctl.domain import limits
from jobctl.domain.clock import iso
from jobctl.domain.models import Job
from jobctl.domain.states import DeadReason
from jobctl.store.rows import ms_to_dt, to_ms

router = APIRouter(prefix="/v1/dlq")
_TIME = TIME_SCHEMA


@router.get(
    "",
    summary="Dead jobs, most recent deaths first (a page)",
    description=pages.PAGE_DOC,
    response_class=pages.PageResponse,
    responses=pages.PAGE_RESPONSES,
)
async def list_dead(
    ctx: Ctx,
    who: Who,
    limit: ListLimit = 100,
    cursor: pages.CursorParam = None,
    queue: str | None = None,
    reason: DeadReason | None = None,
    since: Annotated[
        str | None, Query(description="ISO-8601 with an offset", json_schema_extra=_TIME)
    ] = None,
    all_users: AllUsers = False,
) -> pages.PageResponse:
    when = since_time(since)
    owner = who.owner_filter(all_users, "dead jobs")
    scope = (owner, queue, reason, None if when is None else iso(when))
    before = None
    if cursor is not None:
        at, job_id = pages.decode(cursor, "dead", scope, (int, int))
        before = (ms_to_dt(int(at)), int(job_id))
    jobs = await ctx.store.run(ctx.st.list_dead, queue, reason, when, limit + 1, owner, before)
    return pages.page(jobs, limit, job_out, _dead_key, "dead", scope)


def _dead_key(job: Job) -> tuple[int, int]:
    assert job.finished_at is not None  # a dead job has finished
    return to_ms(job.finished_at), job.id


@router.get("/{job_id}", summary="One dead job with its latest attempts (as GET /v1/jobs/{id})")
async def show_dead(job_id: JobIdPath, ctx: Ctx, who: Who) -> dict[str, Any]:
    return await job_detail(ctx, who, job_id)


@router.post("/replay", summary="Fresh budget for dead jobs, released at most `rate` per second")
async def replay(body: ReplayIn, ctx: Ctx, who: Who) -> dict[str, Any]:
    """By ids: each must exist and be the caller's (else 404 naming it, the same answer
    for both). Without ids: the caller's oldest dead jobs; ``all_users`` (admins):
    everyone's."""
    if body.ids:
        for job_id in body.ids[: body.limit]:  # the store replays no more than these
            await visible_job(ctx, who, job_id)
        owner = None
    else:
        owner = who.owner_filter(body.all_users, "dead jobs")
    most = len(body.ids[: body.limit]) if body.ids else body.limit
    ctx.hooks.admission.admit_jobs(who.uid, most)  # disk floor (503), enqueue rate (429)
    usage = await ctx.store.run(ctx.st.owner_usage, who.uid)
    ctx.hooks.admission.admit_queued(who.uid, usage["queued"], most)
    jobs = await ctx.store.run(
        ctx.st.replay, body.ids, body.limit, body.queue, body.reason, body.rate, owner
    )
    ctx.replayed(jobs)
    if jobs:
        ctx.hooks.wake()
    return {"replayed": [job_out(j) for j in jobs]}


@router.delete("", summary="Delete dead jobs that died more than `older_than` seconds ago")
async def purge(
    ctx: Ctx,
    who: Who,
    older_than: Annotated[float, Query(ge=0, le=limits.MAX_AGE, allow_inf_nan=False)],
    limit: Annotated[int, Query(ge=1, le=limits.MAX_PURGE)] = 100_000,
    all_users: AllUsers = False,
) -> dict[str, Any]:
    owner = who.owner_filter(all_users, "dead jobs")
    cutoff = ctx.store.clock.now() - timedelta(seconds=older_than)
    count, logs = await ctx.store.run(ctx.st.purge_dead, cutoff, limit, owner)
    for path in logs:  # after the commit: a crash here leaves files, never dangling rows
        with contextlib.suppress(OSError):
            os.unlink(path)
    return {"purged": count}
