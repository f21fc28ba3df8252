"""Outcomes of several leased jobs in one request: the ``finish`` list of ``POST
/v1/leases`` ("complete these, lease N more", docs/workers.md).

Why: a worker used to send one complete per task, and each cost an HTTP request, a read
of the job with its attempts (the authorization check) and a write of its own; with a
lease request per freed slot besides, a pull worker's throughput was bounded by round
trips, not by work (issue 16: ~200 no-op tasks/s against huey's ~2,300 on a quiet
machine). Here one request carries every outcome a worker has ready: one read of the jobs
(no attempts) authorizes them all, the finishes join the store's batched writer (one
transaction with whatever else finishes meanwhile), and the answer is per item.

Each item keeps its own guarantees: fenced by its own ``generation`` (a stale one is that
item's ``lease_lost``, not the request's), a repeat of the recorded outcome is that item's
``repeated: true``, and a job the caller may not see is that item's ``not_found`` (as the
single-job routes answer 404): the caller must be the uid holding the lease, the job's
owner, or an admin.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, JsonValue, StrictBool

from jobctl.api.app import Context
from jobctl.api.errors import error_body
from jobctl.api.policy import Caller
from jobctl.api.schemas import NUMBER, STRICT
from jobctl.domain import limits
from jobctl.domain import workers as wk
from jobctl.domain.audit import jobs_target
from jobctl.domain.models import AttemptResult, Finished, Job
from jobctl.domain.states import DeadReason, JobStatus, Outcome
from jobctl.errors import LeaseLost, NotFound

#: The text of a failure the attempt keeps (as the single ``fail`` route).
MAX_ERROR = 16 * 1024
#: Outcomes one request may carry (as many as one lease request may take).
MAX_FINISH = wk.MAX_LEASES


class FinishItemIn(BaseModel):
    """One leased job's outcome: ``complete`` (with ``result``) or ``fail`` (with
    ``error`` and ``retryable``), fenced by ``generation``."""

    model_config = STRICT
    id: Annotated[int, Field(ge=1, le=limits.MAX_ID), NUMBER]
    generation: Annotated[int, Field(ge=1, le=limits.MAX_ID), NUMBER]
    outcome: Literal["complete", "fail"]
    #: ``complete``: kept (as JSON, its first 4 KiB) as the attempt's output tail.
    result: JsonValue = None
    #: ``fail``: the failure's text (its last 4 KiB kept).
    error: Annotated[str, Field(max_length=MAX_ERROR)] = ""
    #: ``fail``: false makes the job dead at once (``non_retryable``).
    retryable: StrictBool = True


FinishList = Annotated[list[FinishItemIn], Field(max_length=MAX_FINISH)]


def completed(result: object) -> AttemptResult:
    """A worker's ``complete``: the result (as JSON, its first 4 KiB) is the output tail."""
    return AttemptResult(Outcome.SUCCEEDED, output_tail=wk.result_text(result))


def failed(error: str, retryable: bool) -> AttemptResult:
    """A worker's ``fail``: its text's last 4 KiB; not retryable makes the job dead."""
    text = (error or "failed")[-4096:]
    return AttemptResult(
        Outcome.FAILED,
        error=text,
        output_tail=text,
        dead_reason=None if retryable else DeadReason.NON_RETRYABLE,
    )


def recorded(job: Job, generation: int, outcome: Outcome) -> bool:
    """Whether the attempt of ``generation`` already ended with ``outcome`` (a repeat of
    the call that ended it)."""
    return any(a.generation == generation and a.outcome is outcome for a in job.attempts)


def attempt_result(item: FinishItemIn) -> AttemptResult:
    """The attempt's end, as the single ``complete``/``fail`` routes record it."""
    if item.outcome == "complete":
        return completed(item.result)
    return failed(item.error, item.retryable)


async def finish_batch(
    ctx: Context, who: Caller, items: Sequence[FinishItemIn], results: Sequence[AttemptResult]
) -> tuple[list[dict[str, Any]], str]:
    """Per-item answers, in order, and the audit target (``jobs:7..12 n=6``).
    ``results``: the items' :func:`attempt_result` (made first: a bad one is a 422 of the
    whole request before anything is done)."""
    ids = [i.id for i in items]
    jobs = await ctx.store.run(_read, ctx.st, ids)
    mine = wk.worker_owner(who.uid)
    allowed = [
        j is not None and (who.sees(j.spec.owner_uid) or j.lease_owner == mine) for j in jobs
    ]
    done = await asyncio.gather(
        *(
            ctx.store.finish(item.id, item.generation, result)
            for item, result, ok in zip(items, results, allowed, strict=True)
            if ok
        ),
        return_exceptions=True,
    )
    answers: dict[int, Finished | BaseException] = dict(
        zip([n for n, ok in enumerate(allowed) if ok], done, strict=True)
    )
    out = []
    for n, (item, result, job) in enumerate(zip(items, results, jobs, strict=True)):
        got = answers.get(n)
        if isinstance(got, Finished) and job is not None:
            out.append(_done(ctx, item, result, job.spec.queue, got))
        elif isinstance(got, BaseException) and not isinstance(got, LeaseLost | NotFound):
            raise got  # the store itself failed (the disk): the request fails
        else:
            out.append(await _refused(ctx, who, item))
    return out, "finish " + jobs_target(sorted(set(ids)))


def _read(st: Any, ids: Sequence[int]) -> list[Job | None]:
    """The jobs (without attempts: enough for the owner and lease checks), in one thread
    hop; None for a job that does not exist."""
    out: list[Job | None] = []
    for job_id in ids:
        try:
            out.append(st.get(job_id, False))
        except NotFound:
            out.append(None)
    return out


def _done(
    ctx: Context, item: FinishItemIn, result: AttemptResult, queue: str, got: Finished
) -> dict[str, Any]:
    if got.status is JobStatus.SCHEDULED:
        ctx.hooks.due(got.run_at)  # the retry's time: the timer wakes the waiting workers
    ctx.metrics.finished_as(queue, result, got.status, got.dead_reason)
    return {
        "id": item.id,
        "generation": item.generation,
        "status": got.status.value,
        "repeated": False,
    }


async def _refused(ctx: Context, who: Caller, item: FinishItemIn) -> dict[str, Any]:
    """An item the store refused (or the first read did not allow): a repeat of the
    recorded outcome, a lost lease, or a job the caller may not see (the rare path: the
    job is read again, with its attempts)."""
    head = {"id": item.id, "generation": item.generation}
    try:
        job = await ctx.store.run(ctx.st.get, item.id, True)
    except NotFound:
        job = None
    mine = wk.worker_owner(who.uid)
    if job is None or not (
        who.sees(job.spec.owner_uid)
        or job.lease_owner == mine
        or any(a.lease_owner == mine for a in job.attempts)
    ):
        return head | error_body("not_found", f"no job {item.id}")
    outcome = Outcome.SUCCEEDED if item.outcome == "complete" else Outcome.FAILED
    if recorded(job, item.generation, outcome):
        return head | {"status": job.status.value, "repeated": True}
    lost = LeaseLost(f"job {item.id}: lease lost (generation {item.generation} is stale)")
    return head | error_body(lost.code, lost.message)


__all__ = [
    "MAX_FINISH",
    "FinishItemIn",
    "FinishList",
    "attempt_result",
    "completed",
    "failed",
    "finish_batch",
    "recorded",
]
