"""Value objects that cross layers: what a caller asks for (a job, a schedule's template).

They are plain frozen dataclasses with no I/O so the engine, the API and the tests can
build and compare them freely. Times are aware UTC datetimes. The rules the fields pass
are in :mod:`jobctl.domain.jobcheck`, the body's fingerprint in
:mod:`jobctl.domain.fingerprint`, and what the store hands back (jobs, attempts, claims)
in :mod:`jobctl.domain.records`; all are re-exported here.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobctl.domain import http as web
from jobctl.domain import limits
from jobctl.domain.fingerprint import (
    _FP_PREFIX,
    FINGERPRINT_VERSION,
    _canonical,
    _digest,
    fingerprint_fields,
    fingerprint_of,
    is_current_fingerprint,
)
from jobctl.domain.jobcheck import (
    check_env_name,
    check_job_fields,
    check_on_failure,
    check_payload,
)
from jobctl.domain.limits import clean_text
from jobctl.domain.records import (
    Attempt,
    AttemptResult,
    Claim,
    Finished,
    Job,
    Orphan,
    ProcessRecord,
    QueueStats,
)
from jobctl.domain.resources import Resources
from jobctl.domain.resources import from_json as resources_from_json
from jobctl.domain.slotted import compile_builder
from jobctl.errors import InvalidInput

DEFAULT_QUEUE = "default"

#: Re-exported: the checks, fingerprints and records lived here before (callers import them
#: from this module); :func:`check_job_fields` is looked up here by ``JobSpec`` and templates.
__all__ = [
    "DEFAULT_QUEUE",
    "FINGERPRINT_VERSION",
    "Attempt",
    "AttemptResult",
    "Backoff",
    "Claim",
    "Finished",
    "Job",
    "JobSpec",
    "JobTemplate",
    "Orphan",
    "ProcessRecord",
    "QueueStats",
    "check_env_name",
    "check_job_fields",
    "check_on_failure",
    "check_payload",
    "fields_spec",
    "fingerprint_fields",
    "fingerprint_of",
    "is_current_fingerprint",
    "stored_spec",
    "trusted_spec",
]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter: the n-th retry waits U(0, min(cap, base*2^(n-1)))."""

    base: float = 10.0
    cap: float = 3600.0

    def __post_init__(self) -> None:
        if not 0 <= self.base <= self.cap <= limits.MAX_BACKOFF:
            raise InvalidInput(f"backoff needs 0 <= base <= cap <= {limits.MAX_BACKOFF:.0f}s")

    def ceiling(self, failures: int) -> float:
        """Upper bound of the wait before the retry that follows ``failures`` failures."""
        return min(self.cap, self.base * 2.0 ** min(max(failures - 1, 0), 62))


@functools.lru_cache(maxsize=4096)
def _check_template(template: JobTemplate, owner_uid: int) -> None:
    """:meth:`JobTemplate.check` (a refusal raises, so only templates that pass are kept):
    the checks of ``JobSpec.__post_init__`` but the key's (a template has none), made on
    the template itself. Building a throw-away JobSpec to run them cost about 6 µs a
    schedule, a tenth of a batch item (a test holds the two equal)."""
    del owner_uid  # a key of the memo only: no check depends on it
    check_job_fields(template)
    web.check_job(template)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a caller asks the store to keep: everything needed to run the job later."""

    command: tuple[str, ...]
    run_at: datetime
    owner_uid: int
    key: str | None = None
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    backoff: Backoff = field(default_factory=Backoff)
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = "/"
    schedule_id: str | None = None  # set on jobs a schedule materialized
    scheduled_for: datetime | None = None  # the occurrence's nominal time
    retry_on: tuple[int, ...] | None = None  # only these exit codes are retried
    no_retry_on: tuple[int, ...] = ()  # these exit codes are not retried
    resources: Resources | None = None  # nice, memory_max, cpu_quota (domain/resources.py)
    #: A shell command line run when the job ends dead (engine/notifier.py).
    on_failure: str | None = None
    http: web.HttpRequest | None = None  # a webhook job: this request instead of a command
    #: A payload job (docs/workers.md): JSON text a worker leases, instead of a command.
    payload: str | None = None

    def __post_init__(self) -> None:
        check_job_fields(self)
        web.check_job(self)
        if self.key is not None and not (
            0 < len(self.key) <= limits.MAX_KEY and clean_text(self.key)
        ):
            raise InvalidInput(f"key must be 1-{limits.MAX_KEY} characters, without NUL")

    def fingerprint(self) -> str:
        """Identity of the body for idempotent enqueue (:func:`fingerprint_of`).

        ``run_at`` is left out on purpose: a client that retries ``--in 5m`` computes a
        new ``run_at`` each time, yet it is the same request.
        """
        return fingerprint_of(self._fingerprint_fields())

    def _fingerprint_fields(self) -> dict[str, object]:
        return fingerprint_fields(self, self.owner_uid, self.schedule_id)


_SPEC_FIELDS = tuple(JobSpec.__dataclass_fields__)


def _compile(name: str, params: str, values: dict[str, str]) -> Callable[..., JobSpec]:
    """A straight-line JobSpec builder that skips ``__init__`` and ``__post_init__``.

    A loop over the field names with ``getattr``/``setattr`` cost several µs per spec, a
    measurable share of a batch enqueue; stored slot by slot through a plain twin class
    (:func:`jobctl.domain.slotted.compile_builder`) it costs well under one.
    """
    return compile_builder(JobSpec, name, params, values)


#: ``trusted_spec(**fields)``: a JobSpec from fields that were validated before (an
#: earlier JobSpec wrote them, or the API model checked them and :func:`check_payload`
#: the size), without ``__post_init__``. Every field must be given, by name.
trusted_spec = _compile(
    "trusted_spec", "*, " + ", ".join(_SPEC_FIELDS), {f: f for f in _SPEC_FIELDS}
)

#: ``fields_spec(fields, run_at, key, owner_uid)``: :func:`trusted_spec` of a job that no
#: schedule made, its other fields read from the dict ``fields`` (what the API's model
#: gives, ``JobTemplateIn._job_fields``): unpacking that dict into keywords for
#: ``trusted_spec`` cost a tenth of a batch item's validation.
fields_spec = _compile(
    "fields_spec",
    "fields, run_at, key, owner_uid",
    {f: f"fields[{f!r}]" for f in _SPEC_FIELDS}
    | {
        "run_at": "run_at",
        "key": "key",
        "owner_uid": "owner_uid",
        "schedule_id": "None",
        "scheduled_for": "None",
    },
)

_stored = {f: f"old.{f}" for f in _SPEC_FIELDS} | {
    "run_at": "run_at",
    "key": "key",
    "scheduled_for": "scheduled_for",
}
#: ``stored_spec(spec, run_at, key, scheduled_for)``: ``spec`` as the store keeps it, its
#: assigned key and times cut to whole ms. What ``dataclasses.replace`` gives, without
#: re-running the validation: none of the changed fields is one ``__post_init__`` checks
#: beyond what the store guarantees.
stored_spec = _compile("stored_spec", "old, run_at, key, scheduled_for", _stored)


#: A schedule id that no real one equals, to cut the rendered JSON around it.
_SCHEDULE_MARK = "\x00schedule\x00"


@dataclass(frozen=True, slots=True)
class JobTemplate:
    """The job part of a schedule: what each occurrence runs, and how."""

    command: tuple[str, ...]
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    backoff: Backoff = field(default_factory=Backoff)
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = "/"
    retry_on: tuple[int, ...] | None = None
    no_retry_on: tuple[int, ...] = ()
    resources: Resources | None = None
    on_failure: str | None = None
    http: web.HttpRequest | None = None
    payload: str | None = None

    def check(self, owner_uid: int) -> None:
        """Refuse a template whose jobs the store would refuse (checked when a schedule is
        created, not when it is read: a stored one that fails is marked broken instead).
        A template that passed is remembered: a batch of schedules is checked by the API
        and again by the store, and many schedules share a template."""
        _check_template(self, owner_uid)

    def to_spec(
        self,
        run_at: datetime,
        key: str | None,
        owner_uid: int,
        schedule_id: str | None,
        scheduled_for: datetime | None,
    ) -> JobSpec:
        return JobSpec(
            command=self.command,
            run_at=run_at,
            owner_uid=owner_uid,
            key=key,
            queue=self.queue,
            priority=self.priority,
            max_attempts=self.max_attempts,
            timeout=self.timeout,
            backoff=self.backoff,
            env=self.env,
            cwd=self.cwd,
            schedule_id=schedule_id,
            scheduled_for=scheduled_for,
            retry_on=self.retry_on,
            no_retry_on=self.no_retry_on,
            resources=self.resources,
            on_failure=self.on_failure,
            http=self.http,
            payload=self.payload,
        )

    def fingerprinter(self, owner_uid: int) -> Callable[[str], str]:
        """``fingerprint()`` of this template's occurrence jobs as a function of the schedule
        id: the JSON around the id is rendered once, so the materializer hashes one string
        per occurrence instead of building and rendering a whole spec (same digest)."""
        text = _canonical(fingerprint_fields(self, owner_uid, _SCHEDULE_MARK))
        head, tail = text.split(json.dumps(_SCHEDULE_MARK))
        quote = json.encoder.encode_basestring_ascii  # what json.dumps does with a str
        return lambda schedule_id: _FP_PREFIX + _digest(head + quote(schedule_id) + tail)

    def to_json(self) -> dict[str, object]:
        """The stored (and wire) form; an http template has ``http`` and no ``command``."""
        return (
            ({"command": list(self.command)} if self.http is None and self.payload is None else {})
            | {
                "queue": self.queue,
                "priority": self.priority,
                "max_attempts": self.max_attempts,
                "timeout": self.timeout,
                "backoff": {"base": self.backoff.base, "cap": self.backoff.cap},
                "env": dict(self.env),
                "cwd": self.cwd,
                "retry_on": None if self.retry_on is None else list(self.retry_on),
                "no_retry_on": list(self.no_retry_on),
            }
            | (self.resources.to_json() if self.resources else {})
            | (  # flat: nice, memory_max…
                {} if self.on_failure is None else {"on_failure": self.on_failure}
            )
            | ({"http": self.http.to_json()} if self.http else {})
            | ({} if self.payload is None else {"payload": json.loads(self.payload)})
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobTemplate:
        return cls(
            command=tuple(data.get("command") or ()),
            queue=data["queue"],
            priority=data["priority"],
            max_attempts=data["max_attempts"],
            timeout=data["timeout"],
            backoff=Backoff(data["backoff"]["base"], data["backoff"]["cap"]),
            env=tuple(sorted(data["env"].items())),
            cwd=data["cwd"],
            retry_on=None if data.get("retry_on") is None else tuple(data["retry_on"]),
            no_retry_on=tuple(data.get("no_retry_on") or ()),
            resources=resources_from_json(data),
            on_failure=data.get("on_failure"),
            http=web.from_json(data.get("http")),
            payload=None if "payload" not in data else _payload(data["payload"]),
        )


def _payload(value: object) -> str:
    from jobctl.domain.workers import payload_text

    return payload_text(value)
