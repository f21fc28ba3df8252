"""Dead-letter routes (``/v1/dlq``): list with filters, show, gated replay, purge."""

from __future__ import annotations

import contextlib
import os
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query

from jobctl.api.app import Ctx, JobIdPath, ListLimit
from jobctl.api.schemas import TIME_SCHEMA, DeadReason, ReplayIn, job_out, require_offset
from jobctl.domain import limits
from jobctl.errors import InvalidInput

router = APIRouter(prefix="/v1/dlq")
_TIME = TIME_SCHEMA


def _since(text: str | None) -> datetime | None:
    """``since`` as an ISO-8601 time with an offset (a bare number is not one)."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        require_offset(when)
    except ValueError as exc:
        raise InvalidInput(f"since: {exc}") from None
    return when


@router.get("", summary="Dead jobs, most recent deaths first")
async def list_dead(
    ctx: Ctx,
    limit: ListLimit = 100,
    queue: str | None = None,
    reason: DeadReason | None = None,
    since: Annotated[
        str | None, Query(description="ISO-8601 with an offset", json_schema_extra=_TIME)
    ] = None,
) -> list[dict[str, Any]]:
    when = _since(since)
    jobs = await ctx.store.run(ctx.st.list_dead, queue, reason, when, limit)
    return [job_out(j) for j in jobs]


@router.get("/{job_id}", summary="One dead job with its attempts")
async def show_dead(job_id: JobIdPath, ctx: Ctx) -> dict[str, Any]:
    return job_out(await ctx.store.run(ctx.st.get, job_id), with_attempts=True)


@router.post("/replay", summary="Fresh budget for dead jobs, released at most `rate` per second")
async def replay(body: ReplayIn, ctx: Ctx) -> dict[str, Any]:
    jobs = await ctx.store.run(
        ctx.st.replay, body.ids, body.limit, body.queue, body.reason, body.rate
    )
    ctx.replayed(jobs)
    if jobs:
        ctx.hooks.wake()
    return {"replayed": [job_out(j) for j in jobs]}


@router.delete("", summary="Delete dead jobs that died more than `older_than` seconds ago")
async def purge(
    ctx: Ctx,
    older_than: Annotated[float, Query(ge=0, le=limits.MAX_AGE, allow_inf_nan=False)],
    limit: Annotated[int, Query(ge=1, le=limits.MAX_PURGE)] = 100_000,
) -> dict[str, Any]:
    cutoff = ctx.store.clock.now() - timedelta(seconds=older_than)
    count, logs = await ctx.store.run(ctx.st.purge_dead, cutoff, limit)
    for path in logs:  # after the commit: a crash here leaves files, never dangling rows
        with contextlib.suppress(OSError):
            os.unlink(path)
    return {"purged": count}
