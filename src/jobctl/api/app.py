"""The HTTP/JSON API (``/v1``), served on the daemon's Unix socket.

Routes are thin: validate, turn into a domain spec, one store call, render. A change
that can give the timer work (enqueue, replay) wakes it; a cancel of a running job
tells the executor to stop the process group. Every answer to a write is sent only
after its transaction committed.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import Counter
from starlette.exceptions import HTTPException

from jobctl import __version__, errors
from jobctl.access import Access
from jobctl.api import errors as api_errors
from jobctl.api import fast, logfile, pages, policy
from jobctl.api.admission import Admission
from jobctl.api.effective import effective_out
from jobctl.api.fastproto import FastEnqueue
from jobctl.api.middleware import AuditMiddleware
from jobctl.api.schemas import EnqueueBody
from jobctl.api.views import attempt_out, job_out, queue_out
from jobctl.api.worksignal import WorkSignal
from jobctl.domain import limits
from jobctl.domain.clock import iso
from jobctl.domain.cluster import DaemonBeat
from jobctl.domain.models import Job, QueueStats
from jobctl.domain.notify import NotifyDefaults
from jobctl.domain.resources import Resources
from jobctl.domain.retention import DEFAULT_RETENTION
from jobctl.domain.retry import DEFAULT_RETRY, RetryDefaults
from jobctl.domain.states import JobStatus, Op, StopReason, check_transition
from jobctl.metrics import Metrics, log_jobs
from jobctl.store.aio import AsyncStore
from jobctl.store.base import Store

log = logging.getLogger("jobctl.api")


async def _no_reaper(ages: Mapping[str, float]) -> int:
    """An API without a daemon behind it (tests, tools) has no reaper to prune with."""
    raise errors.Unavailable("no reaper runs behind this API: pruning needs the daemon")


@dataclass
class Hooks:
    """What the API needs from the running daemon beyond the store."""

    wake: Callable[[], None] = lambda: None
    stop_job: Callable[[int, StopReason], bool] = lambda job_id, reason: False
    #: A queue was paused: its jobs claimed ahead of free slots are given back unstarted.
    queue_paused: Callable[[str], None] = lambda name: None
    info: Callable[[], dict[str, Any]] = field(default=lambda: {})
    schedules_changed: Callable[[], None] = lambda: None
    #: Retention age in seconds per final status (the daemon's configured policy).
    retention: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_RETENTION))
    #: What jobs and schedule templates get when they do not give a retry policy.
    retry: RetryDefaults = DEFAULT_RETRY
    #: New work due at a time: wakes the timer only if that is before its next tick.
    due: Callable[[datetime], None] = lambda at: None
    #: Who may use jobctl and who is an admin (allow/deny files, admin group).
    access: Access = field(default_factory=Access)
    #: The settings the daemon started with, as ``jobctl config show --json`` prints them
    #: (empty: not recorded, e.g. an in-process app); served at GET /v1/config.
    settings: Mapping[str, Any] = field(default_factory=dict)
    #: The disk floor and per-owner quotas new work must pass (default: none).
    admission: Admission = field(default_factory=Admission)
    #: Why the daemon cannot apply these resource limits (engine/limits.py); None: it can.
    resources: Callable[[Resources | None], str | None] = lambda res: None
    #: The daemon's failure notifier defaults (``notify.*``), for ``show``'s effective one.
    notify: NotifyDefaults = field(default_factory=NotifyDefaults)
    #: Prune finished jobs past these ages now (the daemon's reaper); returns how many.
    prune: Callable[[Mapping[str, float]], Awaitable[int]] = _no_reaper
    #: Raised at each timer tick: wakes the workers' long-polls (api/worksignal.py).
    work: WorkSignal = field(default_factory=WorkSignal)


@dataclass
class Context:
    store: AsyncStore
    hooks: Hooks
    started: datetime
    metrics: Metrics = field(default_factory=Metrics)

    @property
    def st(self) -> Store:
        return self.store.store

    @functools.cached_property
    def _api_enqueued(self) -> Counter:
        """The ``source="api"`` child of the enqueue counter: ``labels()`` takes a lock
        and builds a key each call, about 3 µs of every single-job enqueue."""
        return self.metrics.jobs_enqueued.labels("api")

    def enqueued(self, jobs: Sequence[Job], request_id: str | None = None) -> bool:
        """Count and log the jobs a request created (an idempotent repeat is no event).
        True when the lines were written with ``request_id`` (see :func:`log_jobs`)."""
        self._api_enqueued.inc(len(jobs))
        return log_jobs(log, "enqueued", jobs, request_id)

    def replayed(self, jobs: Sequence[Job]) -> None:
        """Count and log dead jobs a replay scheduled again."""
        self.metrics.replayed(jobs)
        log_jobs(log, "replayed", jobs)


async def _ctx(request: Request) -> Context:
    # async on purpose: FastAPI runs a plain-def dependency on a thread pool, per request
    ctx: Context = request.app.state.ctx
    return ctx


Ctx = Annotated[Context, Depends(_ctx)]


async def _caller(request: Request) -> policy.Caller:
    ctx: Context = request.app.state.ctx
    return policy.caller_of(request.scope, ctx.hooks.access)


#: The request's caller (:mod:`jobctl.api.policy`): owner checks and list filters.
Who = Annotated[policy.Caller, Depends(_caller)]
AllUsers = Annotated[
    bool, Query(description="Everyone's, not only the caller's (admins only; else 403)")
]
#: A job id in a path: ids are signed 64-bit, so a larger one is a 422, not a 500.
JobIdPath = Annotated[int, PathParam(ge=1, le=limits.MAX_ID)]
ListLimit = Annotated[int, Query(ge=1, le=limits.MAX_LIST)]
router = APIRouter(prefix="/v1")


def owner_uid(request: Request) -> int:
    """The caller's uid from the socket's peer credentials (the daemon's own in-process)."""
    return fast.peer_uid(request.scope)


#: How many of its latest attempts a job's detail shows (``GET /v1/jobs/{id}`` and the
#: DLQ's); all of them are paged at ``GET /v1/jobs/{id}/attempts``. A job replayed again
#: and again has no bound on its attempts: its detail must have one.
ATTEMPTS_SHOWN = 20


async def visible_job(ctx: Context, who: policy.Caller, job_id: int) -> Job:
    """The job (without its attempts), if the caller may see it; else as if it did not
    exist."""
    job = await ctx.store.run(ctx.st.get, job_id, False)
    who.check(job.spec.owner_uid, errors.NotVisible(f"no job {job_id}", job_id=job_id))
    return job


async def job_detail(ctx: Context, who: policy.Caller, job_id: int) -> dict[str, Any]:
    """A visible job with its last :data:`ATTEMPTS_SHOWN` attempts, how many it has, how
    many are not shown and the paged list that holds them all."""
    job, total = await ctx.store.run(ctx.st.get_latest, job_id, ATTEMPTS_SHOWN)
    who.check(job.spec.owner_uid, errors.NotVisible(f"no job {job_id}", job_id=job_id))
    queue = await ctx.store.run(ctx.st.queue_policy, job.spec.queue)
    return job_out(job, with_attempts=True) | {
        "effective": effective_out(job, queue, ctx.hooks.notify),
        "attempts_total": total,
        "attempts_earlier": total - len(job.attempts),
        "attempts_url": f"/v1/jobs/{job_id}/attempts",
    }


@router.post(
    "/jobs",
    status_code=201,
    summary="Enqueue one job, or a list atomically",
    responses={200: {"description": "Every job already existed (same key, same body)"}},
)
async def enqueue(body: EnqueueBody, request: Request, ctx: Ctx) -> JSONResponse:
    # Served by jobctl.api.fast in the daemon; this route documents it in the OpenAPI
    # document and answers the same way when the FastAPI app is used on its own.
    status, out = await fast.enqueue_body(ctx, body, owner_uid(request), request.scope["state"])
    return JSONResponse(out, status)


@router.get(
    "/jobs",
    summary="List jobs, newest first (a page)",
    description=pages.PAGE_DOC,
    response_class=pages.PageResponse,
    responses=pages.PAGE_RESPONSES,
)
async def list_jobs(
    ctx: Ctx,
    who: Who,
    status: JobStatus | None = None,
    queue: str | None = None,
    limit: ListLimit = 100,
    cursor: pages.CursorParam = None,
    before: Annotated[
        int | None, Query(ge=1, le=limits.MAX_ID, description="Ids below this (else: cursor)")
    ] = None,
    all_users: AllUsers = False,
) -> pages.PageResponse:
    owner = who.owner_filter(all_users)
    scope = (owner, status, queue)
    if cursor is not None:
        [before] = pages.decode(cursor, "jobs", scope, (int,))  # type: ignore[assignment]
    jobs = await ctx.store.run(ctx.st.list_jobs, status, queue, limit + 1, before, owner)
    return pages.page(jobs, limit, job_out, lambda j: (j.id,), "jobs", scope)


@router.get(
    "/jobs/{job_id}/attempts",
    summary="A job's attempts, in order (a page)",
    description=pages.PAGE_DOC,
    response_class=pages.PageResponse,
    responses=pages.PAGE_RESPONSES,
)
async def list_attempts(
    job_id: JobIdPath,
    ctx: Ctx,
    who: Who,
    limit: ListLimit = 100,
    cursor: pages.CursorParam = None,
) -> pages.PageResponse:
    await visible_job(ctx, who, job_id)
    after = 0
    if cursor is not None:
        [after] = pages.decode(cursor, "attempts", (job_id,), (int,))  # type: ignore[assignment]
    found = await ctx.store.run(ctx.st.list_attempts, job_id, limit + 1, after)
    return pages.page(found, limit, attempt_out, lambda a: (a.number,), "attempts", (job_id,))


@router.get(
    "/jobs/{job_id}",
    summary="One job with its latest attempts",
    description=f"The job, its last {ATTEMPTS_SHOWN} attempts in order (`attempts`), how many "
    "it has (`attempts_total`) and how many are not shown (`attempts_earlier`); "
    "`attempts_url` pages through all of them.",
)
async def get_job(job_id: JobIdPath, ctx: Ctx, who: Who) -> dict[str, Any]:
    return await job_detail(ctx, who, job_id)


_LOG_HEADERS = {
    "X-Log-Start": "Offset in the log file of the first byte sent (resume at start + length)",
    "X-Log-Size": "Size of the log file when it was opened",
    "X-Attempt-Running": "1 while the attempt runs (its log may grow), else 0",
    "X-Job-Status": "The job's status when the log was opened",
}


@router.get(
    "/jobs/{job_id}/attempts/{number}/log",
    response_class=PlainTextResponse,
    summary="Captured output of one attempt, streamed",
    description="The bytes of the attempt's log from `offset`, or its last `tail` lines, "
    "streamed in chunks. `jobctl logs --follow` polls with `offset` = "
    "`X-Log-Start` + bytes received while `X-Attempt-Running` is 1.",
    responses={
        200: {
            "content": {"text/plain": {}},
            "headers": {
                k: {"description": v, "schema": {"type": "string"}} for k, v in _LOG_HEADERS.items()
            },
        }
    },
)
async def attempt_log(
    job_id: JobIdPath,
    number: Annotated[int, PathParam(ge=1, le=limits.MAX_ATTEMPTS)],
    ctx: Ctx,
    who: Who,
    tail: Annotated[
        int | None, Query(ge=0, le=limits.MAX_ID, description="Only the last N lines")
    ] = None,
    offset: Annotated[
        int, Query(ge=0, le=limits.MAX_ID, description="Start at this byte (resume)")
    ] = 0,
) -> Response:
    job = await visible_job(ctx, who, job_id)
    found = await ctx.store.run(ctx.st.list_attempts, job_id, 1, number - 1)
    if not found or found[0].number != number:
        raise errors.NotFound(f"job {job_id} has no attempt {number}", job_id=job_id)
    attempt = found[0]
    meta = {
        "X-Attempt-Running": "0" if attempt.finished_at is not None else "1",
        "X-Job-Status": job.status.value,
    }
    piece = None
    if attempt.log_path:
        piece = await anyio.to_thread.run_sync(logfile.open_slice, attempt.log_path, offset, tail)
    if piece is None:  # no file (pruned, or never written): the stored output tail
        start, data = logfile.slice_text(attempt.output_tail.encode(), offset, tail)
        meta |= {"X-Log-Start": str(start), "X-Log-Size": str(start + len(data))}
        return Response(data, media_type=_TEXT, headers=meta)
    meta |= {"X-Log-Start": str(piece.start), "X-Log-Size": str(piece.size)}
    return StreamingResponse(piece.chunks(), media_type=_TEXT, headers=meta)


_TEXT = "text/plain; charset=utf-8"


@router.post(
    "/jobs/{job_id}/cancel",
    summary="Cancel a scheduled or running job",
    description="Idempotent: a job already cancelled answers 200 with the job unchanged and "
    "`already_cancelled: true`; one that ended otherwise (succeeded, dead) answers 409 "
    "`illegal_transition` with its `status`.",
)
async def cancel(job_id: JobIdPath, ctx: Ctx, who: Who) -> dict[str, Any]:
    """The job as cancelled, and whether it was so before this request: ``jobctl cancel``
    says "was already cancelled" from the answer alone (it read the job first). A job in
    a final state is answered from the read: nothing can move it, so no write is needed
    (a repeated cancel cost a write transaction, where the CLI's read had cost a read)."""
    before = await visible_job(ctx, who, job_id)  # the owner never changes: check it first
    if before.status is JobStatus.CANCELLED:
        return job_out(before) | {"already_cancelled": True}
    if before.status.is_final:  # succeeded: the store's own 409
        check_transition(job_id, before.status, JobStatus.CANCELLED, Op.CANCEL)
    result = await ctx.store.run(ctx.st.cancel, job_id, "cancelled by user")
    if result.was_running:
        ctx.hooks.stop_job(job_id, StopReason.CANCEL)
    ctx.hooks.wake()
    if result.job.spec.schedule_id is not None:
        ctx.hooks.schedules_changed()  # a queued occurrence may wait for this job
    # Two cancels racing past the read both say "cancelled": harmless, and the store's
    # answer does not tell the two apart.
    return job_out(result.job) | {"already_cancelled": False}


@router.get("/status", summary="Daemon, counts and per-queue health")
async def status(ctx: Ctx, request: Request) -> dict[str, Any]:
    """``state`` is ``ok``, ``degraded`` with the reason in ``degraded`` (a corrupt
    store: writes answer 503), or ``unavailable`` with the reason in ``degraded`` (the
    database server cannot be reached: writes answer 503 until it is back); what cannot
    be read then is left empty, never a 500."""
    now = ctx.store.clock.now()
    adm = ctx.hooks.admission
    stats: list[QueueStats] = []
    usage: dict[str, int] | None = None
    totals: dict[str, Any] | None = None
    logs: dict[str, int] | None = None
    daemons: list[DaemonBeat] = []
    away: str | None = None
    try:
        stats, usage, totals, logs, daemons = await ctx.store.run(
            _status_reads, ctx.st, owner_uid(request)
        )
    except errors.StoreCorrupt:  # degraded: what cannot be read stays empty
        pass
    except errors.StoreUnavailable as exc:
        away = exc.message
    counts = dict.fromkeys((s.value for s in JobStatus), 0)
    for q in stats:
        for name in counts:
            counts[name] += getattr(q, name)
    degraded = ctx.st.degraded()
    state = "ok" if degraded is None else "degraded"
    if away is not None and degraded is None:
        state, degraded = "unavailable", away
    return {
        "version": __version__,
        "pid": os.getpid(),
        "state": state,
        "degraded": degraded,
        "started_at": iso(ctx.started),
        "uptime": (now - ctx.started).total_seconds(),
        "now": iso(now),
        "counts": counts,
        "queues": [queue_out(q, now) for q in stats],
        "schedules": None if totals is None else _schedule_totals(totals, now),
        "disk": adm.disk.info() if adm.disk is not None else None,
        "quota": None if usage is None else adm.usage(owner_uid(request), usage),
        "logs": logs,
        "daemons": [daemon_out(d, now) for d in daemons],
        **ctx.hooks.info(),
    }


def _status_reads(
    st: Store, uid: int
) -> tuple[list[QueueStats], dict[str, int], dict[str, Any], dict[str, int], list[DaemonBeat]]:
    """Every read ``status`` makes, in one trip to the store's thread pool and (on
    PostgreSQL) one transaction."""

    def reads() -> tuple[
        list[QueueStats], dict[str, int], dict[str, Any], dict[str, int], list[DaemonBeat]
    ]:
        logs = {"bytes": st.log_bytes(None), "owner_bytes": st.log_bytes(uid)}
        return st.stats(), st.owner_usage(uid), st.schedule_totals(), logs, st.daemons()

    return st.together(reads)


def daemon_out(d: DaemonBeat, now: datetime) -> dict[str, Any]:
    """One daemon of the cluster (PostgreSQL), as ``status`` shows it."""
    return {
        "owner": d.owner,
        "host": d.host,
        "pid": d.pid,
        "version": d.version,
        "started_at": iso(d.started_at),
        "last_seen": iso(d.last_seen),
        "running": d.running,
        "slots": d.slots,
        "state": d.state(now),
    }


def _schedule_totals(totals: dict[str, Any], now: datetime) -> dict[str, Any]:
    nxt = totals.pop("next_run_at")
    totals["next_run_at"] = iso(nxt)
    totals["lag"] = max(0.0, (now - nxt).total_seconds()) if nxt else 0.0
    return totals


@router.get("/config", summary="The daemon's effective settings and their sources (admins)")
async def config(ctx: Ctx) -> dict[str, Any]:
    view = dict(ctx.hooks.settings) or {"config_file": None, "settings": {}, "derived": {}}
    daemon = {"version": __version__, "pid": os.getpid(), "started_at": iso(ctx.started)}
    return {"daemon": daemon, **view}


def create_app(
    store: AsyncStore, hooks: Hooks | None = None, metrics: Metrics | None = None
) -> AuditMiddleware:
    app = FastAPI(
        title="jobctl",
        version=__version__,
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
        description='Durable job scheduler API. Errors: {"error": {"code", "message"}}.',
    )
    app.state.ctx = Context(store, hooks or Hooks(), store.clock.now(), metrics or Metrics())
    app.add_exception_handler(errors.JobctlError, api_errors.jobctl_error)
    app.add_exception_handler(RequestValidationError, api_errors.validation_error)
    app.add_exception_handler(HTTPException, api_errors.http_error)
    app.add_exception_handler(OSError, api_errors.os_error)
    app.include_router(router, responses=api_errors.ERROR_RESPONSES)
    from jobctl.api import (  # they import this module
        audit,
        dlq,
        leases,
        queues,
        rerun,
        retention,
        schedules,
    )
    from jobctl.api import metrics as metrics_api
    from jobctl.api import secrets as secrets_api

    extras = (
        audit.router,
        schedules.router,
        queues.router,
        dlq.router,
        retention.router,
        metrics_api.router,
        secrets_api.router,
        leases.router,
        rerun.router,
    )
    for extra in extras:
        app.include_router(extra, responses=api_errors.ERROR_RESPONSES)
    routes = fast.RouteTable.from_routers((router, *extras))
    ctx: Context = app.state.ctx
    # outermost: request ids, the audit trail and 500s see every request, fast path too;
    # inside it the gate decides who may do what and marks its decision in the scope
    front = fast.EnqueueFront(app, routes)
    gate = policy.Gate(front, ctx.hooks.access)
    audited = AuditMiddleware(gate, store.store, store.clock)
    # the server answers a plain POST /v1/jobs with these same layers, without ASGI
    audited.fast_enqueue = FastEnqueue(audited, gate, front)
    return audited
