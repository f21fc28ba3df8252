"""``POST /v1/jobs/{job_id}/rerun``: a new job from a finished job's definition.

Why a route and not a client-side copy: the new job must be the *original owner's* (an
admin rerunning a user's job must not make a root job of the user's command, cwd and
environment), and only the server may enqueue for another uid. The trust rules are those
of cancel: the owner or an admin (another user gets the 404 a missing id gets).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, field_validator

from jobctl.api.app import Ctx, JobIdPath, Who, visible_job
from jobctl.api.views import job_out
from jobctl.api.wiretypes import STRICT, TIME_SCHEMA, require_offset, time_text
from jobctl.errors import Conflict, InvalidInput

router = APIRouter(prefix="/v1")


class RerunIn(BaseModel):
    """When the new job runs: ``run_at`` (with an offset), else now (the body ``{}``; a
    JSON body is required, as on every POST that takes one)."""

    model_config = STRICT
    run_at: Annotated[datetime, Field(json_schema_extra=TIME_SCHEMA)] | None = None

    _text = field_validator("run_at", mode="before")(time_text)
    _aware = field_validator("run_at")(require_offset)


@router.post(
    "/jobs/{job_id}/rerun",
    status_code=201,
    summary="Enqueue a new job from a finished job's definition",
    description="The new job (new id and key) has the old one's command or body, queue, "
    "priority, retry, timeout, limits and owner (an admin's rerun is still the owner's "
    'job); the body is `{}` or `{"run_at": ...}` (default: now). '
    "409 `conflict` for a job not finished yet.",
)
async def rerun(
    job_id: JobIdPath, body: RerunIn, ctx: Ctx, who: Who, request: Request
) -> dict[str, Any]:
    old = await visible_job(ctx, who, job_id)
    if not old.status.is_finished:
        raise Conflict(
            f"job {job_id} is {old.status}: rerun takes a finished job "
            "(succeeded, dead or cancelled)",
            job_id=job_id,
        )
    now = ctx.store.clock.now()
    run_at = (body.run_at or now).astimezone(UTC)
    spec = dataclasses.replace(
        old.spec, run_at=run_at, key=None, schedule_id=None, scheduled_for=None
    )
    why = ctx.hooks.resources(spec.resources) if spec.resources else None
    if why is not None:  # the daemon's limits changed since: refused as add refuses it
        raise InvalidInput(why)
    ctx.hooks.admission.admit_jobs(who.uid, 1, now)  # disk floor (503), the caller's rate
    [made] = await ctx.store.insert([spec])
    ctx.enqueued([made.job], getattr(request.state, "request_id", None))
    ctx.hooks.due(made.job.run_at)
    return job_out(made.job)
