"""Errors to HTTP: the one table, and the JSON body every error has.

Body: ``{"error": {"code": "...", "message": "...", ...details}}``. Anything the caller
got wrong is a 4xx; a 500 means a bug or a failing disk, never bad input.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException

from jobctl import errors
from jobctl.api.wording import readable
from jobctl.domain.limits import MAX_BATCH, PATTERN_HELP
from jobctl.store.writer import resource_error

#: Most specific first; the first class an error is an instance of wins.
HTTP_STATUS: list[tuple[type[errors.JobctlError], int]] = [
    (errors.HeaderTooLarge, 431),
    (errors.InvalidInput, 422),
    (errors.NotFound, 404),
    (errors.Forbidden, 403),
    (errors.LeaseLost, 409),
    (errors.QuotaExceeded, 429),
    (errors.Unavailable, 503),
    (errors.Conflict, 409),
    (errors.DaemonLocked, 503),
    (errors.TooManyConnections, 503),
    (errors.DaemonUnavailable, 503),
    (errors.StoreCorrupt, 503),
    (errors.StoreError, 500),
    (errors.JobctlError, 500),
]


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")  # and the ids it concerns
    code: str
    message: str


class ErrorOut(BaseModel):
    """The body of every error answer."""

    error: ErrorDetail


def _documented(description: str) -> dict[str, Any]:
    # JSON whatever the route's own answers are (an attempt's log is text/plain)
    ref = {"$ref": "#/components/schemas/ErrorOut"}
    return {
        "model": ErrorOut,
        "description": description,
        "content": {"application/json": {"schema": ref}},
    }


#: The error answers every route may give, in the OpenAPI document (422 replaces FastAPI's
#: own shape: jobctl answers ``{"error": ...}`` there too).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _documented("The body is not valid JSON"),
    404: _documented("No such job, attempt, schedule or route"),
    405: _documented("Method not allowed; the Allow header lists those that are"),
    409: _documented("The request contradicts the stored state (a key, a lease, a name)"),
    415: _documented("A JSON body sent without Content-Type: application/json"),
    422: _documented("Invalid input; the message names each bad field"),
}


def status_for(exc: errors.JobctlError) -> int:
    return next(code for cls, code in HTTP_STATUS if isinstance(exc, cls))


def error_body(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **details}}


def retry_after(exc: errors.JobctlError) -> dict[str, str]:
    """The ``Retry-After`` header of a refusal that is only for now (503 and 429)."""
    seconds = exc.details.get("retry_after")
    if not isinstance(exc, (errors.Unavailable, errors.QuotaExceeded)):
        return {}
    wait = seconds if isinstance(seconds, int | float) and seconds > 0 else 1
    return {"Retry-After": str(max(1, math.ceil(wait)))}


async def jobctl_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.JobctlError)
    details = {k: v for k, v in exc.details.items() if isinstance(v, (str, int, float, bool))}
    body = error_body(exc.code, exc.message, **details)
    return JSONResponse(body, status_for(exc), headers=retry_after(exc))


async def validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    message = validation_message(exc.errors(), getattr(exc, "body", None))
    return JSONResponse(error_body("invalid_input", message), 422)


def validation_message(errs: Any, body: object) -> str:
    """One line naming each bad field of a job body (or list of them)."""
    if isinstance(body, list) and not 1 <= len(body) <= MAX_BATCH:
        return f"a batch holds 1 to {MAX_BATCH} jobs"
    problems = []
    for err in _one_union_branch(errs, body):
        loc = tuple(err.get("loc", ()))
        loc = loc[1:] if loc[:1] == ("body",) else loc  # the request body, not a field "body"
        where = ".".join(str(p) for p in loc if not _is_tag(p))
        msg = field_problem(err)
        problems.append(f"{where}: {msg}" if where else msg)
    if isinstance(body, (str, int, float, bool)):
        return "the body must be a job object or a list of job objects"
    return "; ".join(problems) or "invalid request"


def field_problem(err: dict[str, Any]) -> str:
    """What a pattern means when the value did not match it, our validators' words, the
    common kinds in jobctl's words (api/wording.py), else pydantic's message."""
    if err.get("type") == "string_pattern_mismatch":
        pattern = (err.get("ctx") or {}).get("pattern")
        if pattern in PATTERN_HELP:
            return PATTERN_HELP[pattern]
    if err.get("type") == "value_error":  # our validators' own words, without the prefix
        return str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return readable(err) or str(err.get("msg", "invalid"))


def _is_tag(part: object) -> bool:
    """Union branch names pydantic puts in error locations (``JobIn``, ``list[JobIn]``,
    and a model with an after-validator: ``function-after[_one_body(), JobIn]``)."""
    return isinstance(part, str) and (part[:1].isupper() or part.startswith(("list[", "function-")))


def _one_union_branch(errs: Any, body: object) -> list[dict[str, Any]]:
    """Keep only the errors of the branch the body was meant for (object or list)."""

    def branch(err: dict[str, Any]) -> str | None:
        tags = [p for p in err.get("loc", ()) if _is_tag(p)]
        return tags[0] if tags else None

    wanted = "list[" if isinstance(body, list) else None
    kept = [
        e
        for e in errs
        if branch(e) is None or (wanted is not None) == str(branch(e)).startswith("list[")
    ]
    return kept or list(errs)


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    routes = getattr(request.app.state, "routes", None)
    if exc.status_code == 405 and routes is not None:
        # Starlette names the methods of the first route matching the path only; a path
        # served by several routes (GET and POST /v1/jobs) takes all of theirs.
        headers["Allow"] = ", ".join(sorted(routes.allowed(request.url.path)))
    return JSONResponse(error_body(code, str(exc.detail)), exc.status_code, headers=headers)


async def os_error(request: Request, exc: Exception) -> JSONResponse:
    """An OSError in a route (a log file read at the open-file limit): out of descriptors
    or memory is a 503 with ``Retry-After``; anything else stays the bug it is (500)."""
    refusal = resource_error(exc)
    if refusal is None:
        raise exc
    return await jobctl_error(request, refusal)
