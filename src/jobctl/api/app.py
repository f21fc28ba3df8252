"""The HTTP/JSON API (``/v1``), served on the daemon's Unix socket.

Routes are thin: validate, turn into a domain spec, one store call, render. A change
that can give the timer work (enqueue, replay) wakes it; a cancel of a running job
tells the executor to stop the process group. Every answer to a write is sent only
after its transaction committed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException

from jobctl import __version__, errors
from jobctl.api import errors as api_errors
from jobctl.api.schemas import JobIn, ReplayIn, job_out, queue_out
from jobctl.domain.clock import iso
from jobctl.domain.states import JobStatus
from jobctl.store.aio import AsyncStore

MAX_BATCH = 10_000


@dataclass
class Hooks:
    """What the API needs from the running daemon beyond the store."""

    wake: Callable[[], None] = lambda: None
    stop_job: Callable[[int, str], bool] = lambda job_id, reason: False
    info: Callable[[], dict[str, Any]] = field(default=lambda: {})


def create_app(store: AsyncStore, hooks: Hooks | None = None) -> FastAPI:
    hooks = hooks or Hooks()
    clock = store.clock
    st = store.store
    started = clock.now()
    app = FastAPI(
        title="jobctl", version=__version__, openapi_url="/v1/openapi.json",
        docs_url=None, redoc_url=None,
        description="Durable job scheduler API. Errors: {\"error\": {\"code\", \"message\"}}.",
    )
    app.add_exception_handler(errors.JobctlError, api_errors.jobctl_error)
    app.add_exception_handler(RequestValidationError, api_errors.validation_error)
    app.add_exception_handler(HTTPException, api_errors.http_error)

    def owner(request: Request) -> int:
        return int(getattr(request.state, "peer_uid", os.geteuid()))

    @app.post("/v1/jobs", status_code=201, summary="Enqueue one job, or a list atomically")
    async def enqueue(body: JobIn | list[JobIn], request: Request) -> JSONResponse:
        items = body if isinstance(body, list) else [body]
        if not items or len(items) > MAX_BATCH:
            raise errors.InvalidInput(f"a batch holds 1 to {MAX_BATCH} jobs")
        uid, now = owner(request), clock.now()
        specs = [item.to_spec(uid, now) for item in items]
        inserted = await store.run(st.insert, specs)
        if any(i.created for i in inserted):
            hooks.wake()
        if isinstance(body, list):
            out: Any = [job_out(i.job) | {"created": i.created} for i in inserted]
            code = 201 if any(i.created for i in inserted) else 200
        else:
            out, code = job_out(inserted[0].job), 201 if inserted[0].created else 200
        return JSONResponse(out, code)

    @app.get("/v1/jobs", summary="List jobs, newest first")
    async def list_jobs(
        status: JobStatus | None = None, queue: str | None = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        before: Annotated[int | None, Query(ge=1)] = None,
    ) -> list[dict[str, Any]]:
        jobs = await store.run(st.list, status, queue, limit, before)
        return [job_out(j) for j in jobs]

    @app.get("/v1/jobs/{job_id}", summary="One job with its attempts")
    async def get_job(job_id: int) -> dict[str, Any]:
        return job_out(await store.run(st.get, job_id), with_attempts=True)

    @app.get("/v1/jobs/{job_id}/attempts/{number}/log", response_class=PlainTextResponse,
             summary="Captured output of one attempt")
    async def attempt_log(job_id: int, number: int) -> PlainTextResponse:
        job = await store.run(st.get, job_id)
        found = [a for a in job.attempts if a.number == number]
        if not found:
            raise errors.NotFound(f"job {job_id} has no attempt {number}", job_id=job_id)
        path = found[0].log_path
        text = Path(path).read_bytes().decode(errors="replace") if path and Path(
            path).exists() else found[0].output_tail
        return PlainTextResponse(text)

    @app.post("/v1/jobs/{job_id}/cancel", summary="Cancel a scheduled or running job")
    async def cancel(job_id: int) -> dict[str, Any]:
        result = await store.run(st.cancel, job_id, "cancelled by user")
        if result.was_running:
            hooks.stop_job(job_id, "cancelled by user")
        hooks.wake()
        return job_out(result.job)

    @app.get("/v1/dlq", summary="Dead jobs, newest first")
    async def dlq(limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
                  queue: str | None = None) -> list[dict[str, Any]]:
        jobs = await store.run(st.list, JobStatus.DEAD, queue, limit, None)
        return [job_out(j) for j in jobs]

    @app.post("/v1/dlq/replay", summary="Move dead jobs back to scheduled (idempotent)")
    async def replay(body: ReplayIn) -> dict[str, Any]:
        jobs = await store.run(st.replay, body.ids, body.limit)
        if jobs:
            hooks.wake()
        return {"replayed": [job_out(j) for j in jobs]}

    @app.get("/v1/status", summary="Daemon, counts and per-queue health")
    async def status() -> dict[str, Any]:
        stats = await store.run(st.stats)
        now = clock.now()
        counts = {s.value: 0 for s in JobStatus}
        for q in stats:
            for name in ("scheduled", "running", "succeeded", "dead", "cancelled"):
                counts[name] += getattr(q, name)
        return {
            "version": __version__, "pid": os.getpid(), "started_at": iso(started),
            "uptime": (now - started).total_seconds(), "now": iso(now), "counts": counts,
            "queues": [queue_out(q, now) for q in stats], **hooks.info(),
        }

    return app


