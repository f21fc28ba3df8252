"""Wire types shared by the API's models: times, numbers, names and resource limits, with
the bounds of :mod:`jobctl.domain.limits` (also in the OpenAPI document), and the config
every wire model takes (:data:`STRICT`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    StrictFloat,
)

from jobctl.domain import limits
from jobctl.domain import resources as res
from jobctl.errors import InvalidInput


def since_time(text: str | None) -> datetime | None:
    """A ``since`` query parameter: an ISO-8601 time with an offset (a bare number is not
    one), as :data:`TIME_SCHEMA` documents it."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        require_offset(when)
    except ValueError as exc:
        raise InvalidInput(f"since: {exc}") from None
    return when


def require_offset(v: datetime | None) -> datetime | None:
    """Times on the wire are absolute (a naive one would mean the daemon's zone, silently)
    and inside the calendar the store and the schedules can compute with."""
    if v is None:
        return v
    if v.tzinfo is None:
        raise ValueError("needs a UTC offset, e.g. 2027-03-14T06:00:00Z")
    if not limits.MIN_TIME.year <= v.year < limits.MAX_TIME.year:  # as written (TIME_PATTERN)
        raise ValueError(f"must be from {limits.MIN_TIME.year} to before {limits.MAX_TIME.year}")
    return v


def json_number(v: object) -> object:
    """A number on the wire is a JSON number, as the OpenAPI document says (pydantic would
    also take ``true`` or ``"5"``); an integral float such as 170.0 is an integer there."""
    if isinstance(v, bool | str):
        raise ValueError("must be a number")
    return v


def time_text(v: object) -> object:
    """A time on the wire is an ISO-8601 string, as the OpenAPI document says (pydantic
    would also take a number of seconds since the epoch)."""
    if v is not None and not isinstance(v, str | datetime):
        raise ValueError("must be an ISO-8601 time string, e.g. 2027-03-14T06:00:00Z")
    return v


#: A time in the OpenAPI document: RFC 3339 with a year the API accepts.
TIME_SCHEMA: dict[str, Any] = {"format": "date-time", "pattern": limits.TIME_PATTERN}
#: Wire types with the limits of :mod:`jobctl.domain.limits` (also in the OpenAPI document).
Text = Annotated[str, Field(pattern=limits.TEXT_PATTERN)]
QueueName = Annotated[
    str, Field(min_length=1, max_length=limits.MAX_QUEUE_NAME, pattern=limits.NONEMPTY_TEXT_PATTERN)
]
#: The queue of a new job or schedule template (stricter than :data:`QueueName`, which
#: names queues that may have been stored before the rule).
NewQueueName = Annotated[
    str, Field(min_length=1, max_length=limits.MAX_QUEUE_NAME, pattern=limits.QUEUE_NAME_PATTERN)
]
#: After an integer's Field: the constraints stay in the OpenAPI document (before it they
#: would be lost to the validator). Floats are ``StrictFloat`` (a JSON number, ints too):
#: cheaper than a Python validator, and ``StrictInt`` would refuse 170.0, an integer to
#: JSON Schema.
NUMBER = BeforeValidator(json_number)
JobId = Annotated[int, Field(ge=1, le=limits.MAX_ID), NUMBER]
Seconds = Annotated[StrictFloat, Field(ge=0, le=limits.MAX_BACKOFF)]
ExitCode = Annotated[int, Field(ge=0, le=255), NUMBER]
Timeout = Annotated[StrictFloat, Field(ge=limits.MIN_TIMEOUT, le=limits.MAX_TIMEOUT)]
#: Every wire model: unknown fields are a 422, and so are NaN and infinities.
STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)

#: Resource limits and the failure notifier, as a job and a queue (its jobs' defaults)
#: take them: niceness, memory.max bytes, % of one CPU (domain/resources.py), and a
#: shell command line run as the owner when a job ends dead (engine/notifier.py).
Nice = Annotated[int, Field(ge=res.MIN_NICE, le=res.MAX_NICE), NUMBER]
MemoryMax = Annotated[int, Field(ge=res.MIN_MEMORY, le=res.MAX_MEMORY), NUMBER]
CpuQuota = Annotated[StrictFloat, Field(ge=res.MIN_CPU_QUOTA, le=res.MAX_CPU_QUOTA)]
OnFailure = Annotated[
    str,
    Field(min_length=1, max_length=limits.MAX_ON_FAILURE, pattern=limits.NONEMPTY_TEXT_PATTERN),
]
