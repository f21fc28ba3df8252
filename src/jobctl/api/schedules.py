"""Schedule routes (``/v1/schedules``): create, list, show, edit, pause, resume, trigger,
delete."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from jobctl.api import errors as api_errors
from jobctl.api import pages
from jobctl.api.app import AllUsers, Context, Ctx, ListLimit, Who, owner_uid
from jobctl.api.policy import Caller
from jobctl.api.schedule_edit import SchedulePatch, edit_out
from jobctl.api.schedule_schemas import (
    ScheduleBody,
    ScheduleIn,
    created_out,
    detail_out,
    schedule_out,
)
from jobctl.api.views import job_out
from jobctl.domain.schedule import Schedule, ScheduleSpec
from jobctl.errors import InvalidInput, InvalidSchedule, JobctlError, NotFound, NotVisible
from jobctl.localzone import local_zone_name

router = APIRouter(prefix="/v1/schedules")
_TICK = timedelta(milliseconds=1)  # fires() is exclusive: include next_run_at itself
#: How many of its latest edits a schedule's detail shows.
EDITS_SHOWN = 5


async def visible(ctx: Context, who: Caller, ref: str) -> Schedule:
    """The schedule ``ref`` names, if the caller may see it; else as if it did not exist.
    Every route below acts on the id this returns (the owner never changes)."""
    sched = await ctx.store.run(ctx.st.get_schedule, ref, who.uid)  # a name: the caller's
    who.check(sched.spec.owner_uid, NotVisible(f"no schedule {ref!r}", schedule=ref))
    return sched


@router.post(
    "",
    status_code=201,
    summary="Create a cron or interval schedule, or a list of them",
    description="A list is created in one transaction; each item answers alone, in order: "
    "the schedule with `created: true`, or `created: false` and the `error` that refused it "
    "(a name taken: `conflict`). 201 if any item was created, else 200.",
    responses={200: {"description": "A list of which no item was created"}},
)
async def create(body: ScheduleBody, request: Request, ctx: Ctx) -> Response:
    uid, now = owner_uid(request), ctx.store.clock.now()
    if not isinstance(body, list):
        spec = body.to_spec(uid, now, local_zone_name(), ctx.hooks.retry)
        spec.timing.next_after(now)  # refuses one that can never fire
        _check_limits(spec, ctx)
        usage = await ctx.store.run(ctx.st.owner_usage, uid)
        ctx.hooks.admission.admit_schedule(uid, usage["schedules"])  # 503 / 429
        sched = await ctx.store.run(ctx.st.create_schedule, spec)
        ctx.hooks.schedules_changed()
        return JSONResponse(schedule_out(sched), 201)
    specs = _specs(body, uid, now, ctx)
    usage = await ctx.store.run(ctx.st.owner_usage, uid)
    ctx.hooks.admission.admit_schedule(uid, usage["schedules"], len(specs))  # 503 / 429
    answers = await ctx.store.run(ctx.st.create_schedules, specs)
    ctx.hooks.schedules_changed()
    made = sum(isinstance(a, Schedule) for a in answers)
    request.state.audit_target = f"schedules:n={made}"  # else the audit parses the answer
    # orjson, as pages are: json.dumps of 1,000 schedules took ~13 ms, orjson ~1 ms
    return pages.PageResponse([_item_out(a) for a in answers], 201 if made else 200)


def _specs(items: list[ScheduleIn], uid: int, now: datetime, ctx: Context) -> list[ScheduleSpec]:
    """The specs of a list, an error naming the item for one that can never be stored."""
    zone, out = local_zone_name(), []
    for i, item in enumerate(items):
        try:
            spec = item.to_spec(uid, now, zone, ctx.hooks.retry)
            _check_limits(spec, ctx)
        except JobctlError as exc:
            raise type(exc)(f"{i}: {exc.message}", **exc.details) from None
        out.append(spec)
    return out


def _check_limits(spec: ScheduleSpec, ctx: Context) -> None:
    """Refuse resource limits this daemon cannot apply (a 400 now, not a failed attempt
    at every occurrence)."""
    if spec.template.resources is None:  # no limits asked for: nothing to refuse
        return
    refused = ctx.hooks.resources(spec.template.resources)
    if refused is not None:
        raise InvalidInput(f"job: {refused}")


def _item_out(answer: Schedule | JobctlError) -> dict[str, Any]:
    if isinstance(answer, Schedule):
        return created_out(answer)  # orjson only: its job is a Fragment
    return {"created": False} | api_errors.error_body(answer.code, answer.message, **answer.details)


@router.get(
    "",
    summary="Schedules, oldest first (a page)",
    description=pages.PAGE_DOC,
    response_class=pages.PageResponse,
    responses=pages.PAGE_RESPONSES,
)
async def list_schedules(
    ctx: Ctx,
    who: Who,
    deleted: bool = False,
    limit: ListLimit = 100,
    cursor: pages.CursorParam = None,
    after: Annotated[
        str | None, Query(max_length=64, description="Id of the last schedule seen (else: cursor)")
    ] = None,
    all_users: AllUsers = False,
) -> pages.PageResponse:
    owner = who.owner_filter(all_users, "schedules")
    scope = (owner, deleted)
    if cursor is not None:
        [after] = pages.decode(cursor, "schedules", scope, (str,))  # type: ignore[assignment]
    found = await ctx.store.run(ctx.st.list_schedules, deleted, limit + 1, after, owner)
    return pages.page(found, limit, schedule_out, lambda s: (s.id,), "schedules", scope)


@router.get("/{ref}", summary="One schedule (id or name) with next fires and history")
async def show(
    ref: str, ctx: Ctx, who: Who, history: Annotated[int, Query(ge=1, le=500)] = 10
) -> dict[str, Any]:
    sched = await visible(ctx, who, ref)
    jobs, skips = await ctx.store.run(ctx.st.schedule_history, sched.id, history)
    if jobs:
        # with its last attempt: the last run's outcome
        jobs[0], _ = await ctx.store.run(ctx.st.get_latest, jobs[0].id, 1)
    fires: list[datetime] = []
    if not (sched.deleted_at or sched.broken_at):
        try:
            fires = sched.spec.timing.fires(
                max(sched.next_run_at, ctx.store.clock.now()) - _TICK, 5
            )
        except InvalidSchedule:  # its zone left tzdata: shown, and broken when due
            fires = []
    edits = await ctx.store.run(ctx.st.schedule_edits, sched.id, EDITS_SHOWN)
    return detail_out(sched, fires, jobs, skips) | {"edits": [edit_out(e) for e in edits]}


@router.patch("/{ref}", summary="Edit: the fields given change, the rest is kept")
async def edit(ref: str, body: SchedulePatch, ctx: Ctx, who: Who) -> dict[str, Any]:
    """One transaction: occurrences already due run under the old definition, the
    cursor is recomputed from now when the timing changed, ``broken`` is cleared and the
    edit is recorded (see docs/schedules.md, "Editing a schedule")."""
    sched = await visible(ctx, who, ref)
    if sched.deleted_at is not None:
        raise NotFound(f"schedule {sched.id} is deleted: it cannot be edited", schedule=ref)
    now = ctx.store.clock.now()
    spec = body.apply(sched.spec, now, ctx.hooks.retry)
    spec.timing.next_after(now)  # refuses one that can never fire
    if spec.template.resources != sched.spec.template.resources:
        _check_limits(spec, ctx)  # now, as a create is, not at every occurrence's start
    new, change = await ctx.store.run(ctx.st.edit_schedule, sched.id, spec, sched.spec, who.uid)
    ctx.hooks.schedules_changed()
    return schedule_out(new) | {"edit": edit_out(change)}


@router.post("/{ref}/pause", summary="Stop materializing occurrences")
async def pause(ref: str, ctx: Ctx, who: Who) -> dict[str, Any]:
    sched = await visible(ctx, who, ref)
    return schedule_out(await ctx.store.run(ctx.st.pause_schedule, sched.id))


@router.post("/{ref}/resume", summary="Continue from the next occurrence; record what passed")
async def resume(ref: str, ctx: Ctx, who: Who) -> dict[str, Any]:
    found = await visible(ctx, who, ref)
    sched, passed = await ctx.store.run(ctx.st.resume_schedule, found.id)
    ctx.hooks.schedules_changed()
    return schedule_out(sched) | {"skipped_while_paused": passed.count}


@router.post("/{ref}/trigger", status_code=201, summary="Run now as a manual occurrence")
async def trigger(ref: str, ctx: Ctx, who: Who) -> dict[str, Any]:
    sched = await visible(ctx, who, ref)
    ctx.hooks.admission.admit_jobs(who.uid, 1)  # disk floor (503), enqueue rate (429)
    owner = sched.spec.owner_uid  # the occurrence is the schedule owner's job
    usage = await ctx.store.run(ctx.st.owner_usage, owner)
    ctx.hooks.admission.admit_queued(owner, usage["queued"], 1)
    job = await ctx.store.run(ctx.st.trigger_schedule, sched.id)
    ctx.hooks.wake()
    return job_out(job)


@router.delete("/{ref}", summary="Delete (its jobs and history stay)")
async def delete(ref: str, ctx: Ctx, who: Who) -> dict[str, Any]:
    sched = await visible(ctx, who, ref)
    return schedule_out(await ctx.store.run(ctx.st.delete_schedule, sched.id))
