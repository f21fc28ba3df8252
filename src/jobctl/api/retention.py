"""Retention route (``/v1/prune``): prune finished jobs past their age now, or count them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, StrictBool

from jobctl.api.app import Ctx
from jobctl.domain.retention import cutoffs

router = APIRouter(prefix="/v1")


class PruneIn(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    dry_run: StrictBool = False


@router.post("/prune", summary="Delete finished jobs older than the retention ages")
async def prune(body: PruneIn, ctx: Ctx) -> dict[str, Any]:
    ages = dict(ctx.hooks.retention)
    if body.dry_run:
        limits = cutoffs(ages, ctx.store.clock.now())
        counts = await ctx.store.run(ctx.st.prunable, limits)
        return {"dry_run": True, "retention": ages, "jobs": counts}
    pruned = await ctx.hooks.prune(ages)  # the daemon's reaper, with these ages
    return {"dry_run": False, "retention": ages, "pruned": pruned}
