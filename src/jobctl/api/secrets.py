"""Webhook signing secrets (``/v1/secrets``): create, list, show, rotate, delete.

A secret's value is answered only to its owner and to admins (another user gets 404, as
for a name that does not exist) and is never logged: the audit trail records the route,
not the body. Values are made here (:func:`jobctl.webhooks.new_secret`), never taken
from the caller, so every secret has its 32 random bytes.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from jobctl import webhooks
from jobctl.api.app import AllUsers, Ctx, Who
from jobctl.api.policy import Caller
from jobctl.api.wiretypes import NUMBER, STRICT
from jobctl.domain.clock import iso
from jobctl.domain.http import SECRET_NAME, WebhookSecret
from jobctl.errors import NotVisible
from jobctl.store.base import SecretStore, secrets_of
from jobctl.store.rows import ms_to_dt

router = APIRouter(prefix="/v1/secrets")
#: How long the previous secret still signs after a rotation, when not said (seconds).
DEFAULT_GRACE = 86_400.0
MAX_GRACE = 30 * 86_400.0

Name = Annotated[str, Field(pattern=SECRET_NAME.pattern)]
NamePath = Annotated[str, PathParam(pattern=SECRET_NAME.pattern)]
Uid = Annotated[
    int | None, Query(ge=0, le=2**32 - 1, description="Whose (admins: anyone's); default: yours")
]


class SecretIn(BaseModel):
    model_config = STRICT
    name: Name = "default"
    #: Whose secret (admins only for another user's); default: the caller's.
    owner_uid: Annotated[int, Field(ge=0, le=2**32 - 1), NUMBER] | None = None


def secret_out(s: WebhookSecret, with_value: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "owner_uid": s.owner_uid,
        "name": s.name,
        "created_at": iso(ms_to_dt(s.created_at)),
        "rotated_at": None if s.rotated_at is None else iso(ms_to_dt(s.rotated_at)),
        "previous_until": None if s.previous_until is None else iso(ms_to_dt(s.previous_until)),
    }
    if with_value:
        out["secret"] = s.secret
        out["previous"] = s.previous
    return out


def _owner(who: Caller, uid: int | None, name: str) -> int:
    """Whose secret a request is for: another user's only for admins (else a 404)."""
    owner = who.uid if uid is None else uid
    who.check(owner, NotVisible(f"no secret {name!r} of uid {owner}", name=name))
    return owner


def _part(ctx: Any) -> SecretStore:
    return secrets_of(ctx.st)


@router.post("", status_code=201, summary="Create a webhook signing secret (whsec_…)")
async def create(body: SecretIn, ctx: Ctx, who: Who) -> JSONResponse:
    owner = _owner(who, body.owner_uid, body.name)
    made = await ctx.store.run(_part(ctx).create_secret, owner, body.name, webhooks.new_secret())
    return JSONResponse(secret_out(made, True), 201)


@router.get("", summary="List webhook signing secrets (names and times, never values)")
async def list_(ctx: Ctx, who: Who, all_users: AllUsers = False) -> list[dict[str, Any]]:
    owner = who.owner_filter(all_users, "secrets")
    found = await ctx.store.run(_part(ctx).list_secrets, owner)
    return [secret_out(s, False) for s in found]


@router.get("/{name}", summary="Show a secret with its value (its owner and admins only)")
async def show(name: NamePath, ctx: Ctx, who: Who, uid: Uid = None) -> dict[str, Any]:
    owner = _owner(who, uid, name)
    return secret_out(await ctx.store.run(_part(ctx).get_secret, owner, name), True)


@router.post("/{name}/rotate", summary="Replace a secret; the old one still signs a while")
async def rotate(
    name: NamePath,
    ctx: Ctx,
    who: Who,
    uid: Uid = None,
    grace: Annotated[
        float, Query(ge=0, le=MAX_GRACE, description="Seconds the old secret still signs")
    ] = DEFAULT_GRACE,
) -> dict[str, Any]:
    owner = _owner(who, uid, name)
    grace_ms = round(grace * 1000)
    new = webhooks.new_secret()
    return secret_out(
        await ctx.store.run(_part(ctx).rotate_secret, owner, name, new, grace_ms), True
    )


@router.delete("/{name}", summary="Delete a secret (its jobs then fail, unsent)")
async def delete(name: NamePath, ctx: Ctx, who: Who, uid: Uid = None) -> dict[str, Any]:
    owner = _owner(who, uid, name)
    await ctx.store.run(_part(ctx).delete_secret, owner, name)
    return {"owner_uid": owner, "name": name, "deleted": True}
