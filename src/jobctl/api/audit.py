"""``GET /v1/audit``: the audit trail, for admins only (see :mod:`jobctl.api.middleware`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from jobctl.api import pages
from jobctl.api.app import Ctx, owner_uid
from jobctl.api.schemas import TIME_SCHEMA
from jobctl.api.wiretypes import since_time
from jobctl.domain.audit import AuditRecord
from jobctl.domain.clock import iso
from jobctl.errors import Forbidden

router = APIRouter(prefix="/v1")


def record_out(r: AuditRecord) -> dict[str, Any]:
    return {
        "id": r.id,
        "at": iso(r.at),
        "request_id": r.request_id,
        "uid": r.uid,
        "gid": r.gid,
        "pid": r.pid,
        "action": r.action,
        "target": r.target,
        "status": r.status,
        "error": r.error,
        "denied": r.denied,
    }


@router.get(
    "/audit",
    summary="The audit trail, newest first (a page; admins only)",
    description=pages.PAGE_DOC,
    response_class=pages.PageResponse,
    responses=pages.PAGE_RESPONSES,
)
async def list_audit(
    request: Request,
    ctx: Ctx,
    uid: Annotated[int | None, Query(ge=0, le=2**32 - 1, description="Only this caller")] = None,
    action: Annotated[
        str | None,
        Query(max_length=200, description="This action, or every action under it (schedules)"),
    ] = None,
    since: Annotated[
        str | None,
        Query(
            description="At or after this time (ISO-8601 with an offset)",
            json_schema_extra=TIME_SCHEMA,
        ),
    ] = None,
    before: Annotated[
        int | None, Query(ge=1, le=2**62, description="Ids below this (else: cursor)")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    cursor: pages.CursorParam = None,
) -> pages.PageResponse:
    # the gate refuses non-admins already (ROUTES: audit); checked here too, in depth
    if not ctx.hooks.access.is_admin(owner_uid(request)):
        request.state.denied = True
        raise Forbidden("only admins may read the audit trail")
    when = since_time(since)
    scope = (uid, action, None if when is None else iso(when))
    if cursor is not None:
        [before] = pages.decode(cursor, "audit", scope, (int,))  # type: ignore[assignment]
    await ctx.store.run(ctx.st.flush_audit)  # what was just done is in the answer
    found = await ctx.store.run(ctx.st.list_audit, uid, action, when, before, limit + 1)
    return pages.page(found, limit, record_out, lambda r: (r.id or 0,), "audit", scope)
