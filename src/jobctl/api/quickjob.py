"""The common enqueue body, validated without pydantic: a proof, or nothing.

Validating ``{"command": ["true"], "run_at": "2099-01-01T00:00:00Z"}`` through the
:class:`jobctl.api.schemas.JobIn` adapter, then ``to_spec``, was about a ninth of the
daemon's event-loop CPU per single-job request (issue 15: 6.5 % ``validate_json``, 5.5 %
``to_spec``), most of it pydantic's Python-level validators (``time_text``,
``require_offset``, ``json_number``, ``_program``, ``_one_body``) and the model instance
that ``to_spec`` only reads back. :func:`parse` reads such a body with ``orjson`` and
checks it by hand against the same rules, for the few fields a plain command job carries:

- ``command``: a non-empty list of strings, the first not empty, none holding a NUL;
- ``queue``: printable ASCII without a space, 1 to ``MAX_QUEUE_NAME`` characters (a
  subset of ``QUEUE_NAME_PATTERN``: other names go the long way);
- ``priority``, ``max_attempts``: JSON integers within their bounds (``null`` for
  ``max_attempts``);
- ``timeout``: a JSON number (or ``null``) within its bounds, a float as pydantic makes it;
- ``key``: 1 to ``MAX_KEY`` characters without a NUL (or ``null``);
- ``cwd``: an absolute path, 1 to ``MAX_CWD`` characters without a NUL;
- ``run_at``: ``YYYY-MM-DDTHH:MM:SS[.f{1,6}](Z|±HH:MM)``, a year 1970-8999 as written.

A batch (a JSON list) is proved item by item (:func:`read`): every item provable and the
list within its limits, else the whole batch is pydantic's.

Anything else (another field, another type or shape, a value at the edge of what these
checks can prove, JSON that ``orjson`` refuses) gives ``None``, and the caller
validates the body with pydantic as before: every refusal, and so every error message, is
pydantic's. Strings from ``orjson`` are valid UTF-8 (it refuses lone surrogates), so "no
NUL" is the whole of ``TEXT_PATTERN``. tests/api/test_quickjob_differential.py holds the
two ways equal: the same :class:`JobSpec` from every body this accepts, and pydantic
accepting every one of them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import orjson

from jobctl.domain import limits
from jobctl.domain.models import JobSpec, check_payload, fields_spec
from jobctl.domain.retry import RetryDefaults

#: The fields :func:`parse` knows; a body with any other goes to pydantic.
FIELDS = frozenset(
    ("command", "queue", "priority", "max_attempts", "timeout", "key", "cwd", "run_at")
)
#: A ``run_at`` both ``datetime.fromisoformat`` and pydantic read alike.
_TIME = re.compile(
    r"([0-9]{4})-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?(?:Z|[+-][0-9]{2}:[0-9]{2})",
    re.ASCII,
)
_TIME_CHARS = len("2099-01-01T00:00:00.000000+00:00")
_MIN_YEAR, _END_YEAR = limits.MIN_TIME.year, limits.MAX_TIME.year


class QuickJob:
    """A body :func:`parse` proved valid: what ``JobIn`` would hold, for :meth:`spec`.

    It keeps the parsed object itself: :meth:`spec` lays the fields given over the
    defaults (``fields_spec`` reads only the names it knows, so ``key`` and ``run_at``
    riding along are harmless), cheaper per batch item than copying each field out."""

    __slots__ = ("body", "command", "key", "run_at")

    def __init__(self, body: dict[str, Any], run_at: datetime | None) -> None:
        self.body = body
        self.command: tuple[str, ...] = tuple(body["command"])
        self.key: str | None = body.get("key")
        self.run_at = run_at

    def spec(self, owner_uid: int, now: datetime, defaults: RetryDefaults) -> JobSpec:
        """``JobIn.to_spec`` of the same body (raises its ``InvalidInput`` on the size)."""
        return specs([self], owner_uid, now, defaults)[0]


def specs(
    jobs: list[QuickJob], owner_uid: int, now: datetime, defaults: RetryDefaults
) -> list[JobSpec]:
    """``JobIn.to_spec`` of each job, in turn (the first too large raises its refusal)."""
    base = _base_fields(defaults)
    out = []
    now_utc = given_utc = now.astimezone(UTC)  # every job without a run_at: this one
    given: datetime | None = None
    for job in jobs:
        command = job.command
        if sum(map(len, command)) * 4 > limits.MAX_PAYLOAD_BYTES:  # else surely under
            check_payload(command, ())
        fields = base | job.body
        fields["command"] = command
        if fields["max_attempts"] is None:
            fields["max_attempts"] = defaults.max_attempts
        timeout = fields["timeout"]
        if timeout is not None:
            fields["timeout"] = float(timeout)
        when = job.run_at
        if when is None:
            run_at = now_utc
        else:  # a batch's items mostly share one datetime (``_time`` caches them)
            if when is not given:
                given, given_utc = when, when.astimezone(UTC)
            run_at = given_utc
        out.append(fields_spec(fields, run_at, job.key, owner_uid))
    return out


def _base_fields(defaults: RetryDefaults) -> dict[str, Any]:
    """What a job that says nothing but its command gets (``max_attempts``: None, the
    daemon's default filled in by :func:`specs`): built once per ``defaults`` (the
    daemon's one object; each job's fields are a copy), not once per request."""
    got = _BASE[0]
    if got[0] is not defaults:
        got = _BASE[0] = (defaults, _new_base_fields(defaults))
    return got[1]


def _new_base_fields(defaults: RetryDefaults) -> dict[str, Any]:
    return {
        "queue": "default",
        "priority": 0,
        "max_attempts": None,
        "timeout": None,
        "backoff": defaults.backoff,
        "env": (),
        "cwd": "/",
        "retry_on": None,
        "no_retry_on": (),
        "resources": None,
        "on_failure": None,
        "http": None,
        "payload": None,
    }


#: The last defaults :func:`_base_fields` was asked for, and their fields.
_BASE: list[tuple[RetryDefaults | None, dict[str, Any]]] = [(None, {})]


def parse(raw: bytes) -> QuickJob | None:
    """The job of ``raw`` if it is a common body proved valid, else None (ask pydantic)."""
    got = read(raw)
    return got if isinstance(got, QuickJob) else None


def read(raw: bytes) -> QuickJob | list[QuickJob] | None:
    """The job of a single-job body, or the jobs of a batch, if every one is proved valid;
    else None, and the whole body goes to pydantic (its refusals, whatever the item).

    A batch is proved only whole and within its limits (1 to ``MAX_BATCH`` items): an
    empty or too long list, or one item this cannot prove, leaves every message, the
    batch's own included, to pydantic."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(body) is dict:
        return _job(body)
    if type(body) is not list or not 0 < len(body) <= limits.MAX_BATCH:
        return None
    jobs = []
    for item in body:
        job = _job(item) if type(item) is dict else None
        if job is None:
            return None
        jobs.append(job)
    return jobs


def _job(body: dict[str, Any]) -> QuickJob | None:
    """One job object proved valid, or None."""
    if "command" not in body or not FIELDS.issuperset(body):
        return None
    for name, value in body.items():  # a loop, not all(<generator>): a tenth of an item
        if not _CHECKS[name](value):
            return None
    run_at = body.get("run_at")
    if run_at is None:
        return QuickJob(body, None)
    when = _time(run_at) if len(run_at) <= _TIME_CHARS else None  # the cache keeps short keys
    return None if when is None else QuickJob(body, when)


def _command(v: Any) -> bool:
    if type(v) is not list or not v:
        return False
    try:
        joined = "".join(v)
    except TypeError:  # an item that is not a string
        return False
    return bool(v[0]) and "\x00" not in joined


def _int_in(low: int, high: int, null: bool = False) -> Any:
    def check(v: Any) -> bool:
        return (null and v is None) or (type(v) is int and low <= v <= high)

    return check


def _queue(v: Any) -> bool:
    return (
        type(v) is str
        and 0 < len(v) <= limits.MAX_QUEUE_NAME
        and v.isascii()
        and v.isprintable()
        and " " not in v
    )


def _timeout(v: Any) -> bool:
    if v is None:
        return True
    # a bool is not a number; NaN fails the bounds (orjson refuses it and infinities)
    return type(v) in (int, float) and limits.MIN_TIMEOUT <= v <= limits.MAX_TIMEOUT


def _key(v: Any) -> bool:
    return v is None or (type(v) is str and 0 < len(v) <= limits.MAX_KEY and "\x00" not in v)


def _cwd(v: Any) -> bool:
    return type(v) is str and 0 < len(v) <= limits.MAX_CWD and v.startswith("/") and "\x00" not in v


def _string(v: Any) -> bool:  # run_at: its shape is checked by _time
    return v is None or type(v) is str


_CHECKS = {
    "command": _command,
    "queue": _queue,
    "priority": _int_in(limits.MIN_PRIORITY, limits.MAX_PRIORITY),
    "max_attempts": _int_in(1, limits.MAX_ATTEMPTS, null=True),
    "timeout": _timeout,
    "key": _key,
    "cwd": _cwd,
    "run_at": _string,
}


@lru_cache(maxsize=1024)  # clients send one ``run_at`` again and again; datetimes are immutable
def _time(text: str) -> datetime | None:
    """``run_at`` as pydantic reads it (an aware datetime), if of the one shape known."""
    shape = _TIME.fullmatch(text)
    if shape is None or not _MIN_YEAR <= int(shape[1]) < _END_YEAR:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:  # no such day, hour or offset: pydantic's message
        return None
