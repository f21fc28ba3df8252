"""``POST /v1/jobs`` served by a plain ASGI handler in front of the FastAPI app.

Enqueue is the one request a busy client sends thousands of times a second. Through
FastAPI each request paid for routing, the middleware stack and dependency solving
(about 350 µs on this project's 2-core bench machine, several times the cost of the
insert itself), so this route bypasses them: the body is validated straight from bytes by
a module-level pydantic ``TypeAdapter`` of the same :class:`JobIn` model, the insert goes
to the store's group-commit writer without a thread hop (``AsyncStore.insert``), and the
answer is rendered by the same :func:`job_out`. Everything else (and the OpenAPI
document, which still describes this route) is FastAPI's.

Behaviour is the FastAPI route's: 201 with the job (200 for a known key), a list for a
list, 422 ``invalid_input`` naming the field, 409 ``key_conflict``; the answer is sent
only after the commit.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from datetime import datetime
from typing import Any

import orjson
from fastapi import APIRouter
from fastapi.openapi.constants import METHODS_WITH_BODY
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError

from jobctl import errors
from jobctl.api import quickjob
from jobctl.api.errors import error_body, retry_after, status_for, validation_message
from jobctl.api.schemas import EnqueueBody, JobIn
from jobctl.api.views import job_out
from jobctl.domain import limits
from jobctl.domain.audit import jobs_target
from jobctl.domain.models import JobSpec
from jobctl.domain.schedule import is_occurrence_key
from jobctl.store.base import Inserted

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: MAX_BODY bounds the memory one request can take while its body is buffered; a full
#: batch of ordinary jobs is a few MB, a batch of near-64-KiB commands must be split.
MAX_BATCH, MAX_BODY = limits.MAX_BATCH, limits.MAX_BODY
_BODY: TypeAdapter[EnqueueBody] = TypeAdapter(EnqueueBody)
_JSON_HEADERS = [(b"content-type", b"application/json")]
log = logging.getLogger("jobctl.api")


class FastRoute:
    """What ``scope["route"]`` holds for the fast path, as Starlette's routes do for
    theirs: the template and methods, for the audit trail and access checks."""

    path = "/v1/jobs"
    methods = frozenset({"POST"})


FAST_ROUTE = FastRoute()


class EnqueueFront:
    """The ASGI app the server runs: the enqueue fast path, else the FastAPI app.

    Every route that takes a JSON body (this one and FastAPI's) refuses any other content
    type with 415 here, in one place: FastAPI alone would read ``text/plain`` as no body.
    """

    def __init__(self, app: Any, route_table: RouteTable | None = None) -> None:
        """``route_table``: the app's (read from its OpenAPI document if not given)."""
        self.app = app
        self._ctx_: Any = None
        self.route_table = route_table or RouteTable(app.openapi())
        app.state.routes = self.route_table  # the 405 handler's Allow comes from it too

    def __getattr__(self, name: str) -> Any:  # state, openapi(), routes… are the app's
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"].rstrip("/") == "/v1/jobs"
        ):
            status, body, headers = await self.answer(scope, lambda: _read_body(receive))
            await _respond(send, status, body, headers)
            return
        if scope["type"] == "http" and self._not_allowed(scope):
            allow = ", ".join(sorted(self.route_table.allowed(scope["path"])))
            body = error_body("method_not_allowed", "Method Not Allowed")
            await _respond(send, 405, body, [(b"allow", allow.encode())])
            return
        if (
            scope["type"] == "http"
            and scope["method"] in _BODY_METHODS
            and not _json_content(scope)
            and self.route_table.takes_json(scope["method"], scope["path"])
        ):
            await _respond(send, 415, _NOT_JSON)
            return
        await self.app(scope, receive, send)

    async def answer(
        self, scope: Scope, read: Callable[[], Awaitable[bytes]]
    ) -> tuple[int, Any, list[tuple[bytes, bytes]]]:
        """The answer to ``POST /v1/jobs`` (status, JSON body, headers but the content's),
        the body read by ``read``: here through ASGI, in the server's fast path
        (:mod:`jobctl.api.fastproto`) straight from the protocol."""
        scope["route"] = FAST_ROUTE
        if not _json_content(scope):
            return 415, _NOT_JSON, []
        state = scope.setdefault("state", {})
        try:
            raw = await read()
            status, body = await enqueue(self._ctx, raw, peer_uid(scope), state)
        except errors.JobctlError as exc:
            details = {k: v for k, v in exc.details.items() if isinstance(v, str | int | float)}
            body = error_body(exc.code, exc.message, **details)
            headers = retry_after(exc)
            return (
                status_for(exc),
                body,
                [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            )
        # the audit trail's target: the jobs it answered with
        state["audit_target"] = jobs_target(
            [i["id"] for i in body] if type(body) is list else [body["id"]]
        )
        return status, body, []

    @property
    def _ctx(self) -> Any:
        """The app's context (``app.state.ctx``), read once it is there: Starlette's
        ``State`` answers each read through ``__getattr__``."""
        ctx = self._ctx_
        if ctx is None:
            ctx = self._ctx_ = self.app.state.ctx
        return ctx

    def _not_allowed(self, scope: Scope) -> bool:
        """A documented path asked with a method it does not take: 405, whatever other
        route the path would also match (GET /v1/dlq/replay is not a dead job's id)."""
        allowed = self.route_table.allowed(scope["path"])
        return bool(allowed) and scope["method"] not in allowed


class RouteTable:
    """Which methods each path takes, and which of them take a JSON body, read from the
    OpenAPI document (the contract clients see, so the two cannot disagree)."""

    def __init__(self, openapi: dict[str, Any]) -> None:
        # Fixed paths first: /v1/dlq/replay is that path, not /v1/dlq/{job_id}.
        self._paths: list[tuple[bool, re.Pattern[str], set[str], set[str]]] = []
        for template, ops in openapi.get("paths", {}).items():
            pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
            methods = {m.upper() for m in ops}
            with_body = {m.upper() for m, op in ops.items() if "requestBody" in op}
            fixed = "{" not in template
            # \Z, not $: "$" also matches before a final newline, so /v1/schedules/%0A
            # was taken for /v1/schedules (and DELETE answered 405)
            self._paths.append((fixed, re.compile(f"^{pattern}/?\\Z"), methods, with_body))

    @classmethod
    def from_routers(cls, routers: Iterable[APIRouter]) -> RouteTable:
        """The table of the OpenAPI document these routers make, read from their routes
        without generating the document (most of an app's start: about a second of a
        2-core machine, at every daemon start and every in-process app of the tests).
        The same rules as FastAPI's document: a route in the schema lists its methods,
        and a method that may carry a body takes one if the route has a body field
        (tests/api/test_route_table.py compares the two tables)."""
        paths: dict[str, dict[str, dict[str, bool]]] = {}
        for router in routers:
            for route in router.routes:
                if not isinstance(route, APIRoute) or not route.include_in_schema:
                    continue
                for method in route.methods or ():
                    body = route.body_field is not None and method in METHODS_WITH_BODY
                    paths.setdefault(route.path, {})[method.lower()] = (
                        {"requestBody": True} if body else {}
                    )
        return cls({"paths": paths})

    def _route(self, path: str) -> tuple[set[str], set[str]]:
        """The methods of the path's documented operations, and those with a body."""
        for want_fixed in (True, False):
            found = [
                (m, b)
                for fixed, regex, m, b in self._paths
                if fixed == want_fixed and regex.match(path)
            ]
            if found:
                return set().union(*(m for m, _ in found)), set().union(*(b for _, b in found))
        return set(), set()

    def allowed(self, path: str) -> set[str]:
        """Every method the path takes (the ``Allow`` of a 405)."""
        return self._route(path)[0]

    def takes_json(self, method: str, path: str) -> bool:
        return method in self._route(path)[1]


_BODY_METHODS = frozenset(("POST", "PUT", "PATCH"))
_NOT_JSON = error_body(
    "unsupported_media_type", "the body must be JSON: send Content-Type: application/json"
)


def _json_content(scope: Scope) -> bool:
    """Whether the request says its body is JSON (``application/json`` or ``…+json``)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media: bytes = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or (
                media.startswith(b"application/") and media.endswith(b"+json")
            )
    return False


async def enqueue(
    ctx: Any, raw: bytes, uid: int, state: MutableMapping[str, Any] | None = None
) -> tuple[int, Any]:
    """Validate, insert (durably) and render one enqueue request body."""
    quick = quickjob.read(raw)
    if quick is not None:  # the common body or batch, proved valid without pydantic
        batch = type(quick) is list
        now = ctx.store.clock.now()
        specs = _quick_specs(ctx, quick, uid, now)
        return await _insert(ctx, specs, batch, uid, now, state)
    try:
        body = _BODY.validate_json(raw)
    except ValidationError as exc:
        raise errors.InvalidInput(_invalid(exc, raw)) from None
    return await enqueue_body(ctx, body, uid, state)


async def enqueue_body(
    ctx: Any,
    body: JobIn | list[JobIn],
    uid: int,
    state: MutableMapping[str, Any] | None = None,
) -> tuple[int, Any]:
    """Insert validated jobs and render the answer: (HTTP status, JSON body)."""
    items = body if isinstance(body, list) else [body]
    batch = isinstance(body, list)
    if not items or len(items) > MAX_BATCH:
        raise errors.InvalidInput(f"a batch holds 1 to {MAX_BATCH} jobs")
    for i, item in enumerate(items):
        _refuse_occurrence_key(item.key, f"{i}.key" if batch else "key")
    now = ctx.store.clock.now()
    specs = [item.to_spec(uid, now, ctx.hooks.retry) for item in items]
    for i, spec in enumerate(specs):
        why = ctx.hooks.resources(spec.resources) if spec.resources else None
        if why is not None:
            raise errors.InvalidInput(f"{i}: {why}" if batch else why)
    return await _insert(ctx, specs, batch, uid, now, state)


def _quick_specs(
    ctx: Any, quick: quickjob.QuickJob | list[quickjob.QuickJob], uid: int, now: datetime
) -> list[JobSpec]:
    """:func:`enqueue_body`'s checks and specs for jobs :mod:`quickjob` proved valid, in
    its order (every key, then each job's size): such a job has no resources to check.
    Not a coroutine of its own: each layer of coroutines is entered again when the
    commit wakes the request (issue 15)."""
    if isinstance(quick, list):
        for i, item in enumerate(quick):
            _refuse_occurrence_key(item.key, f"{i}.key")
        return quickjob.specs(quick, uid, now, ctx.hooks.retry)
    if quick.key is not None:
        _refuse_occurrence_key(quick.key, "key")
    return quickjob.specs([quick], uid, now, ctx.hooks.retry)


def _refuse_occurrence_key(key: str | None, where: str) -> None:
    if key is not None and is_occurrence_key(key):
        raise errors.InvalidInput(
            f"{where}: {key!r} has the shape of a schedule occurrence's key "
            "('<schedule-id>@...'), which only the scheduler may use; choose another key"
        )


async def _insert(
    ctx: Any,
    specs: list[JobSpec],
    batch: bool,
    uid: int,
    now: datetime,
    state: MutableMapping[str, Any] | None,
) -> tuple[int, Any]:
    """Admit, insert and render checked jobs.

    ``state``: the request's ASGI state. The ``event=enqueued`` lines carry its request id
    and, once written, stand in for the audit trail's log line (``audit_logged``): at
    thousands of enqueues a second a second line per request cost a tenth of the rate.
    """
    ctx.hooks.admission.admit_jobs(uid, len(specs), now)  # disk floor (503), rate (429)
    inserted: list[Inserted] = await ctx.store.insert(specs)
    request_id = None if state is None else state.get("request_id")
    new = [i.job for i in inserted if i.created]
    logged = ctx.enqueued(new, request_id)
    if logged and state is not None and request_id is not None:
        state["audit_logged"] = True
    if new:
        ctx.hooks.due(new[0].run_at if len(new) == 1 else min(j.run_at for j in new))
    status = 201 if new else 200
    if not batch:
        return status, job_out(inserted[0].job)
    return status, [_created_out(i) for i in inserted]


def _created_out(inserted: Inserted) -> dict[str, Any]:
    """A batch item's answer: the job, then ``created`` (set on the job's own dict: a
    ``job_out(...) | {...}`` copied its 30 keys once more per item)."""
    out = job_out(inserted.job)
    out["created"] = inserted.created
    return out


def _invalid(exc: ValidationError, raw: bytes) -> str:
    if any(e["type"] == "json_invalid" for e in exc.errors()):
        return "the body is not valid JSON"
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    return validation_message(exc.errors(), parsed)


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise went_away()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise too_large()
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def went_away() -> errors.InvalidInput:
    return errors.InvalidInput("the client went away before sending its body")


def too_large() -> errors.InvalidInput:
    return errors.InvalidInput(f"the body is over {MAX_BODY} bytes")


def peer_uid(scope: Scope) -> int:
    """The caller's uid from the socket's peer credentials (the daemon's own in-process)."""
    uid = scope.get("state", {}).get("peer_uid")
    return os.geteuid() if uid is None else int(uid)


async def _respond(
    send: Send, status: int, body: Any, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers, data = rendered(body, extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def rendered(
    body: Any, extra: list[tuple[bytes, bytes]] | None = None
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """A JSON answer's headers (content type, length, then ``extra``) and bytes."""
    # orjson: rendering a 500-job answer with json.dumps took ~2 ms, a tenth of the
    # request's whole cost; orjson takes ~0.15 ms. Same JSON: compact, UTF-8, and the
    # bodies hold no NaN (the wire models refuse it), which json would reject.
    data = orjson.dumps(body)
    headers = [*_JSON_HEADERS, (b"content-length", b"%d" % len(data))]
    if extra:
        headers += extra
    return headers, data
