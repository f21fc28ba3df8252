"""Queue routes (``/v1/queues``): list with health and limits, set limits, pause, resume.

A queue's settings are its dispatch limits (concurrency, rate, burst, weight, paused)
and the defaults of its jobs (``nice``, ``memory_max``, ``cpu_quota``, ``on_failure``:
domain/queue_defaults.py). Only admins change them (``queue_admin``, api/policy.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Path

from jobctl.api.app import Context, Ctx
from jobctl.api.schemas import QueueIn, queue_out
from jobctl.domain import limits
from jobctl.domain.dispatch import QueuePolicy
from jobctl.domain.resources import Resources
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
        out.append(health | _limits(policy, tokens))
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
    ctx.hooks.wake()
    return {"queue": name} | _limits(saved, None)


@router.post("/{name}/pause", summary="Stop dispatching this queue (it still accepts jobs)")
async def pause(name: QueuePath, ctx: Ctx) -> dict[str, Any]:
    return await _pause(name, True, ctx)


@router.post("/{name}/resume", summary="Dispatch this queue again")
async def resume(name: QueuePath, ctx: Ctx) -> dict[str, Any]:
    return await _pause(name, False, ctx)
