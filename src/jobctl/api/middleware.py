"""The outermost ASGI layer: request ids, the audit trail and the one-line 500.

It wraps the whole app, the enqueue fast path included (:class:`jobctl.api.fast.
EnqueueFront` sits inside it), so every request passes through it exactly once:

- each request gets an id (``scope["state"]["request_id"]``), and every answer carries
  it as ``X-Request-Id``;
- every state-changing request (any method but GET and HEAD) and every denied one is
  recorded (:class:`jobctl.domain.audit.AuditRecord`): in the store, written with the next
  commit, and as one line on the ``jobctl.audit`` logger, except an enqueue that created
  jobs: its ``event=enqueued`` lines carry the request id and stand in for that line
  (``scope["state"]["audit_logged"]``), one line per job instead of two. The
  authorization gate inside it marks a denial (``scope["state"]["denied"]``) and notes
  the route it matched (``scope["state"]["audit_route"]``, which names a request refused
  before routing); the action name comes from the method and the route template, the
  target from the path parameters;
- a 500 is logged as ONE line with its request id (the traceback only at debug level),
  and its body is the usual JSON error with ``request_id`` added, so a user can quote it.
  An exception never reaches the server, which would log a traceback.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import unquote

import orjson

from jobctl.api.fast import ASGIApp, Message, Receive, Scope, Send
from jobctl.api.policy import path_params
from jobctl.domain.audit import (
    READ_METHODS,
    AuditRecord,
    action_for,
    clip,
    new_record,
    target_for,
)
from jobctl.domain.clock import Clock
from jobctl.logfmt import logval
from jobctl.store.base import Store

log = logging.getLogger("jobctl.api")
audit_log = logging.getLogger("jobctl.audit")
#: Bodies read back for their error code (or a new id) at most this long.
MAX_PEEK = 64 * 1024
#: A whole answer: status, headers (all but uvicorn's own), body.
Whole = tuple[int, list[tuple[bytes, bytes]], bytes]
WholeAnswer = Callable[[Scope, Any], Awaitable[Whole]]


class RequestIds:
    """16 hex digits: 8 random ones per daemon run, then a counter. Unique within a run,
    and across runs but for a 1 in 4 billion chance; cheap (a random id per request took
    a system call, ~10 µs on a busy machine)."""

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(4)
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._counter) & 0xFFFFFFFF:08x}"


class _Exchange:
    """What the middleware learns of one request while the app answers it (a class with
    slots, not a dataclass: one per request, and its factories' calls were a share of a
    single-job enqueue's loop time, issue 15)."""

    __slots__ = ("held", "peek", "request_id", "started", "status", "wants_body")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.status = 0
        self.started = False
        self.peek = bytearray()
        self.held: list[Message] = []  # a 500's start, until its body is in
        self.wants_body = False


class AuditMiddleware:
    """See the module docstring. ``store`` keeps the records; ``clock`` stamps them."""

    def __init__(self, app: ASGIApp, store: Store, clock: Clock) -> None:
        self.app = app
        self._store = store
        self._clock = clock
        self._new_id = RequestIds()
        #: What the server answers ``POST /v1/jobs`` with, without ASGI (``create_app``
        #: sets it: :class:`jobctl.api.fastproto.FastEnqueue`); None: ASGI only.
        self.fast_enqueue: Any = None

    def __getattr__(self, name: str) -> Any:  # state, openapi(), routes… are the app's
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ex = self._begin(scope)
        failure: Exception | None = None
        try:
            await self.app(scope, receive, self._sender(scope, ex, send))
        except Exception as exc:  # answered here, logged once below: never re-raised
            failure = exc
            if ex.held:  # a 500 whose body never completed
                await _send_rewritten(send, ex)
            elif not ex.started:
                ex.status, ex.started = 500, True
                ex.held.append({"type": "http.response.start", "status": 500, "headers": []})
                await _send_rewritten(send, ex)
        self._end(scope, ex, failure)

    async def serve(self, scope: Scope, answer: WholeAnswer, arg: Any) -> Whole:
        """What :meth:`__call__` does around the app, for an app that makes its answer
        whole (the server's enqueue fast path, :mod:`jobctl.api.fastproto`): the same
        request id and header, 500 and audit record. ``answer(scope, arg)`` makes the
        answer. Returns (status, headers, body)."""
        ex = self._begin(scope)
        failure: Exception | None = None
        try:
            status, headers, data = await answer(scope, arg)
            ex.status, ex.started = status, True
            if status >= 400 or _wants_target(scope):
                ex.peek += data
            if status == 500:
                headers, data = _rewritten(headers, ex)
            else:
                headers = [*headers, (b"x-request-id", ex.request_id.encode())]
        except Exception as exc:
            failure = exc
            ex.status, ex.started = 500, True
            headers, data = _rewritten([], ex)
        self._end(scope, ex, failure)
        return ex.status, headers, data

    def _begin(self, scope: Scope) -> _Exchange:
        ex = _Exchange(self._new_id())
        scope.setdefault("state", {})["request_id"] = ex.request_id
        return ex

    def _end(self, scope: Scope, ex: _Exchange, failure: Exception | None) -> None:
        if ex.status == 500 or failure is not None:  # (a failure after a 200 began, too)
            _log_500(scope, ex, failure)
        state = scope["state"]
        if scope["method"] not in READ_METHODS or state.get("denied") or ex.status == 403:
            self._record(scope, state, ex)

    def _sender(self, scope: Scope, ex: _Exchange, send: Send) -> Send:
        async def sender(message: Message) -> None:
            if message["type"] == "http.response.start":
                ex.status, ex.started = message["status"], True
                ex.wants_body = ex.status >= 400 or _wants_target(scope)
                message = dict(message)
                message["headers"] = [
                    *message.get("headers", ()),
                    (b"x-request-id", ex.request_id.encode()),
                ]
                if ex.status == 500:  # its body gets the request id: sent once complete
                    ex.held.append(message)
                    return
            elif message["type"] == "http.response.body":
                if ex.wants_body and len(ex.peek) < MAX_PEEK:
                    ex.peek += message.get("body", b"")
                if ex.held:
                    if message.get("more_body", False):
                        return
                    await _send_rewritten(send, ex)
                    return
            await send(message)

        return sender

    def _record(self, scope: Scope, state: dict[str, Any], ex: _Exchange) -> None:
        body = _json(ex.peek) if ex.peek else None
        error = body.get("error") if isinstance(body, dict) else None
        code = str(error.get("code")) if isinstance(error, dict) and "code" in error else None
        record = new_record(
            self._clock.now(),
            ex.request_id,
            state.get("peer_uid"),
            state.get("peer_gid"),
            state.get("peer_pid"),
            _action(scope),
            _target(scope, state, body),
            ex.status,
            code or (None if ex.status < 400 else "http_error"),
            bool(state.get("denied")) or ex.status == 403,
        )
        try:
            self._store.audit([record])
        except Exception as exc:  # the answer is out; losing the record must be loud
            log.error("event=audit_failed request_id=%s error=%s", ex.request_id, logval(exc))
        if audit_log.isEnabledFor(logging.INFO) and not state.get("audit_logged"):
            audit_log.info(audit_line(record))


def audit_line(r: AuditRecord) -> str:
    """The record as one logfmt message (the ``jobctl.audit`` logger's line)."""
    return (
        f"event=audit request_id={r.request_id} uid={_opt(r.uid)} gid={_opt(r.gid)} "
        f"pid={_opt(r.pid)} action={logval(r.action)} target={logval(r.target or '-')} "
        f"status={r.status} error={logval(r.error or '-')} denied={str(r.denied).lower()}"
    )


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


def _template(scope: Scope) -> str | None:
    """The matched route's template (the fast path sets a stand-in route too)."""
    path = getattr(scope.get("route"), "path", None)
    if path is None:  # refused by the gate before routing: the route it matched
        path = scope.get("state", {}).get("audit_route")
    return path if isinstance(path, str) else None


def _action(scope: Scope) -> str:
    return action_for(scope["method"], _template(scope))


def _wants_target(scope: Scope) -> bool:
    """A write whose path names nothing (and whose route gave no target): the ``id`` in
    its answer is the target."""
    return (
        scope["method"] not in READ_METHODS
        and not scope.get("path_params")
        and not scope["state"].get("audit_target")
    )


def _target(scope: Scope, state: dict[str, Any], body: Any) -> str:
    given = state.get("audit_target")
    if given:
        return clip(str(given))
    params = scope.get("path_params")
    route = state.get("audit_route")
    if not params and route and "{" in route:  # refused before routing: from the path
        params = path_params(route, scope.get("path", ""))
    if params:
        return target_for(params, _template(scope))
    if isinstance(body, dict) and "id" in body and "error" not in body:
        template = _template(scope) or ""
        words = [w for w in template.split("/") if w and w != "v1" and "{" not in w]
        kind = words[0].rstrip("s") if words else "id"
        return clip(f"{kind}:{body['id']}")
    query = scope.get("query_string", b"")
    return clip(unquote(query.decode("latin-1"))) if query else ""


def _json(data: bytes | bytearray) -> Any:
    if not data:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _internal_body(original: Any, request_id: str) -> dict[str, Any]:
    """A 500's JSON body: the app's own error if it sent one, with the request id."""
    error = original.get("error") if isinstance(original, dict) else None
    if not isinstance(error, dict) or "code" not in error:
        error = {"code": "internal_error", "message": "internal error"}
    message = f"{error.get('message', 'internal error')} (request id {request_id})"
    return {"error": {**error, "message": message, "request_id": request_id}}


async def _send_rewritten(send: Send, ex: _Exchange) -> None:
    """Send a held 500 with its body as :func:`_internal_body`."""
    start = ex.held.pop()
    headers, data = _rewritten(start.get("headers", ()), ex)
    await send({"type": "http.response.start", "status": 500, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def _rewritten(
    headers: Iterable[tuple[bytes, bytes]], ex: _Exchange
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """A 500's headers and body (:func:`_internal_body`), from the app's headers and the
    body it sent (``ex.peek``)."""
    data = orjson.dumps(_internal_body(_json(ex.peek), ex.request_id))
    ex.peek = bytearray(data)  # what the audit record reads the error code from
    kept = [
        (k, v)
        for k, v in headers
        if k.lower() not in (b"content-length", b"content-type", b"x-request-id")
    ]
    kept += [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(data)),
        (b"x-request-id", ex.request_id.encode()),
    ]
    return kept, data


def _log_500(scope: Scope, ex: _Exchange, failure: Exception | None) -> None:
    if failure is not None:
        what = f"{type(failure).__name__}: {failure}"
    else:
        body = _json(ex.peek)
        error = body.get("error", {}) if isinstance(body, dict) else {}
        what = f"{error.get('code', '?')}: {error.get('message', '')}"
    log.error(
        "event=internal_error request_id=%s method=%s path=%s error=%s",
        ex.request_id,
        scope["method"],
        logval(scope.get("path", "")),
        logval(what),
    )
    if failure is not None:
        log.debug("event=internal_error_traceback request_id=%s", ex.request_id, exc_info=failure)
