"""Queue routes (``/v1/queues``): list with health and limits, set limits, pause, resume,
and a worker queue's workers (who may lease, who holds leases now).

A queue's settings are its dispatch limits (concurrency, rate, burst, weight, paused)
and the defaults of its jobs (``nice``, ``memory_max``, ``cpu_quota``, ``on_failure``:
domain/queue_defaults.py). Only admins change them (``queue_admin``, api/policy.py).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field

from jobctl.api.app import Context, Ctx, Who
from jobctl.api.schemas import QueueIn
from jobctl.api.views import queue_out
from jobctl.api.wiretypes import STRICT
from jobctl.domain import limits
from jobctl.domain.clock import iso
from jobctl.domain.dispatch import QueuePolicy
from jobctl.domain.models import Job
from jobctl.domain.resources import Resources
from jobctl.domain.states import JobStatus
from jobctl.domain.workers import MAX_ALLOW, WORKER_OWNER_PREFIX, parse_allow
from jobctl.errors import InvalidInput

router = APIRouter(prefix="/v1/queues")
#: A queue name in a path, with the limits of a job's ``queue``.
QueuePath = Annotated[
    str,
    Path(min_length=1, max_length=limits.MAX_QUEUE_NAME, pattern=limits.NONEMPTY_TEXT_PATTERN),
]


def _limits(policy: QueuePolicy, tokens: float | None) -> dict[str, Any]:
    return {
        "concurrency": policy.concurrency,
        "rate": policy.rate,
        "burst": policy.burst,
        "weight": policy.weight,
        "paused": policy.paused,
        "tokens": tokens,
        "resources": policy.resources.to_json() if policy.resources else {},
        "on_failure": policy.on_failure,
    }


@router.get("", summary="Every queue with work or settings: health and limits")
async def list_queues(ctx: Ctx) -> list[dict[str, Any]]:
    stats = {s.queue: s for s in await ctx.store.run(ctx.st.stats)}
    configured = {p.name: (p, t) for p, t in await ctx.store.run(ctx.st.queues)}
    workers = await ctx.store.run(ctx.st.worker_queues)
    now = ctx.store.clock.now()
    out = []
    for name in sorted(set(stats) | set(configured)):
        policy, tokens = configured.get(name, (QueuePolicy(name), None))
        health = (
            queue_out(stats[name], now)
            if name in stats
            else {
                "queue": name,
                "waiting": 0,
                "due": 0,
                "running": 0,
                "succeeded": 0,
                "dead": 0,
                "cancelled": 0,
                "oldest_due_age": None,
            }
        )
        allow = workers.get(name)
        out.append(
            health | _limits(policy, tokens) | {"workers": None if allow is None else list(allow)}
        )
    return out


@router.patch(
    "/{name}",
    summary="Set limits and job defaults (fields left out keep their value, null removes)",
)
async def set_queue(name: QueuePath, body: QueueIn, ctx: Ctx) -> dict[str, Any]:
    current = await ctx.store.run(ctx.st.queue_policy, name)
    given = body.model_dump(exclude_unset=True)
    policy = replace(
        current,
        concurrency=given.get("concurrency", current.concurrency),
        rate=given.get("rate", current.rate),
        burst=given.get("burst", current.burst),
        weight=given.get("weight", current.weight),
        resources=_resources(current.resources, given, ctx),
        on_failure=given.get("on_failure", current.on_failure),
    )
    saved = await ctx.store.run(ctx.st.set_queue, policy)
    ctx.hooks.wake()
    return {"queue": name} | _limits(saved, None)


_LIMITS = ("nice", "memory_max", "cpu_quota")


def _resources(current: Resources | None, given: dict[str, Any], ctx: Context) -> Resources | None:
    """The queue's default limits after this change; refused (400) when this daemon
    cannot apply them, with the reason ``add`` gives (never a queue whose every job
    would fail at start)."""
    if not any(k in given for k in _LIMITS):
        return current
    old = current or Resources()
    values = {k: given.get(k, getattr(old, k)) for k in _LIMITS}
    new = Resources(**values) or None
    why = ctx.hooks.resources(new) if new else None
    if why is not None:
        raise InvalidInput(why)
    return new


async def _pause(name: QueuePath, paused: bool, ctx: Ctx) -> dict[str, Any]:
    current = await ctx.store.run(ctx.st.queue_policy, name)
    saved = await ctx.store.run(ctx.st.set_queue, replace(current, paused=paused))
    if paused:
        ctx.hooks.queue_paused(name)
    ctx.hooks.wake()
    return {"queue": name} | _limits(saved, None)


@router.post("/{name}/pause", summary="Stop dispatching this queue (it still accepts jobs)")
async def pause(name: QueuePath, ctx: Ctx) -> dict[str, Any]:
    return await _pause(name, True, ctx)


@router.post("/{name}/resume", summary="Dispatch this queue again")
async def resume(name: QueuePath, ctx: Ctx) -> dict[str, Any]:
    return await _pause(name, False, ctx)


class WorkersIn(BaseModel):
    """Who besides each job's owner and admins may lease this worker queue's jobs."""

    model_config = STRICT
    allow: Annotated[
        list[Annotated[str, Field(pattern=r"^(uid|gid):[0-9]{1,10}$")]],
        Field(max_length=MAX_ALLOW),
    ] = Field(default_factory=list)


@router.put("/{name}/workers", summary="Make a worker queue and set who may lease its jobs")
async def set_workers(name: QueuePath, body: WorkersIn, ctx: Ctx) -> dict[str, Any]:
    allow = parse_allow(body.allow)
    saved = await ctx.store.run(ctx.st.set_worker_queue, name, allow)
    ctx.hooks.work.notify()  # a waiting worker may now take other owners' jobs
    return {"queue": name, "workers": list(saved)}


#: Running jobs one ``GET /v1/queues/{name}/workers`` reads at most (a queue's leases are
#: bounded by its workers' concurrency; past this the answer says ``truncated``).
MAX_LIVE_SCAN = 10_000


@router.get("/{name}/workers", summary="A worker queue's allow list and the workers holding leases")
async def get_workers(name: QueuePath, ctx: Ctx, who: Who) -> dict[str, Any]:
    """Why: an admin setting who may lease wants to see who does. ``workers`` is null
    for a queue the executor serves. ``live`` is per worker uid (an admin sees every
    uid, anyone else their own only; ``leases`` counts everyone's): how many leases it
    holds and the latest ``lease_until`` (each heartbeat moves it on: one in the past is
    a worker gone quiet, whose leases the reaper takes back)."""
    allow = (await ctx.store.run(ctx.st.worker_queues)).get(name)
    running: list[Job] = []
    if allow is not None:
        running = await ctx.store.run(
            ctx.st.list_jobs, JobStatus.RUNNING, name, MAX_LIVE_SCAN, None
        )
    live = live_workers(running)
    return {
        "queue": name,
        "workers": None if allow is None else list(allow),
        "leases": sum(w["leases"] for w in live),
        "live": [w for w in live if who.sees(w["uid"])],
        "truncated": len(running) >= MAX_LIVE_SCAN,
    }


def live_workers(running: list[Job]) -> list[dict[str, Any]]:
    """Per worker uid (from ``lease_owner`` ``@worker:UID``): leases held, latest end."""
    held: dict[int, list[datetime]] = {}
    for job in running:
        owner = job.lease_owner or ""
        if owner.startswith(WORKER_OWNER_PREFIX) and job.lease_until is not None:
            uid = int(owner.removeprefix(WORKER_OWNER_PREFIX))
            held.setdefault(uid, []).append(job.lease_until)
    return [
        {"uid": uid, "leases": len(ends), "lease_until": iso(max(ends))}
        for uid, ends in sorted(held.items())
    ]
