"""Keyset pages: what every list route answers, ``{"items": [...], "next_cursor": ...}``.

A list never answers everything the store holds: at most ``limit`` items (the route's
``ListLimit``), read with a keyset seek (``WHERE key > last key ORDER BY key LIMIT n``,
never ``OFFSET``), so a page costs the same on page 1 and page 10,000, the daemon's memory
for one request is bounded by ``limit`` whatever the store holds, and a walk stays stable
while rows are added or removed (each item shows up once, in order, if it stays).

``next_cursor`` is opaque to clients: base64url of the position (the last item's key)
and a digest of the list it belongs to (kind, owner filter and filters). It is None on
the last page. A cursor given to a list with other filters, or by another user, is
refused (400) rather than silently positioning a different walk. Authorization never
depends on it: the owner filter comes from the request's caller on every page
(:mod:`jobctl.api.policy`), the cursor only says where to start, so even a forged one
shows nobody's rows but the caller's.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import Query
from fastapi.responses import Response

from jobctl.errors import InvalidInput

T = TypeVar("T")
_VERSION = 1

#: The ``cursor`` query parameter of every list route.
CursorParam = Annotated[
    str | None,
    Query(
        max_length=512,
        description="The `next_cursor` of the previous page (opaque); absent: the first page",
    ),
]


def _digest(kind: str, scope: Sequence[Any]) -> str:
    text = json.dumps([kind, *scope], separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def encode(kind: str, scope: Sequence[Any], position: Sequence[int | str]) -> str:
    """The cursor after ``position`` in the list ``kind`` with filters ``scope``."""
    raw = json.dumps([_VERSION, _digest(kind, scope), list(position)], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).rstrip(b"=").decode("ascii")


def decode(text: str, kind: str, scope: Sequence[Any], shape: tuple[type, ...]) -> list[int | str]:
    """The position in ``text``; InvalidInput if it is no cursor of this very list."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        version, digest, position = json.loads(raw)
    except (ValueError, TypeError):
        raise InvalidInput("invalid cursor: pass the next_cursor of a previous page") from None
    if version != _VERSION or not _fits(position, shape):
        raise InvalidInput("invalid cursor: pass the next_cursor of a previous page")
    if digest != _digest(kind, scope):
        raise InvalidInput("this cursor belongs to another list (other filters, or another user's)")
    return list(position)


def _fits(position: object, shape: tuple[type, ...]) -> bool:
    if not isinstance(position, list) or len(position) != len(shape):
        return False
    for value, kind in zip(position, shape, strict=True):
        if isinstance(value, bool) or not isinstance(value, kind):
            return False
        if isinstance(value, int) and not 0 <= value < 2**63:
            return False
    return True


class PageResponse(Response):
    """A page rendered with orjson, past FastAPI's encoder: ``jsonable_encoder`` walked
    every value of 50 schedules (with their job templates) for most of a page's cost."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def page(
    found: Sequence[T],
    limit: int,
    out: Callable[[T], dict[str, Any]],
    key: Callable[[T], Sequence[int | str]],
    kind: str,
    scope: Sequence[Any],
) -> PageResponse:
    """The answer for ``found`` (read with ``limit + 1``: one more says another page
    follows), its cursor made from the key of the last item shown."""
    shown = found[:limit]
    more = len(found) > limit and bool(shown)
    return PageResponse(
        {
            "items": [out(item) for item in shown],
            "next_cursor": encode(kind, scope, key(shown[-1])) if more else None,
        }
    )


#: The OpenAPI description of a page answer (documented once for every list route).
PAGE_DOC = (
    'A page: `{"items": [...], "next_cursor": "..."}`; ask again with `cursor=<next_cursor>` '
    "for the next one; `next_cursor` is null on the last page."
)
#: The 200 answer of every list route in the OpenAPI document.
PAGE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A page",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["items", "next_cursor"],
                    "properties": {
                        "items": {"type": "array", "items": {"type": "object"}},
                        "next_cursor": {"type": ["string", "null"]},
                    },
                }
            }
        },
    }
}
