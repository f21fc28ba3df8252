"""Value objects that cross layers: what a caller asks for, what the store holds.

They are plain frozen dataclasses with no I/O so the engine, the API and the tests can
build and compare them freely. Times are aware UTC datetimes.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from jobctl.domain import http as web
from jobctl.domain import limits
from jobctl.domain.limits import MAX_PAYLOAD_BYTES, clean_text
from jobctl.domain.resources import Resources
from jobctl.domain.resources import from_json as resources_from_json
from jobctl.domain.states import DeadReason, JobStatus, Outcome
from jobctl.errors import InvalidInput

DEFAULT_QUEUE = "default"


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


def check_payload(command: tuple[str, ...], env: tuple[tuple[str, str], ...]) -> None:
    """Refuse a command plus environment over :data:`MAX_PAYLOAD_BYTES` (UTF-8)."""
    chars = sum(map(len, command)) + sum(len(k) + len(v) for k, v in env)
    if chars * 4 <= MAX_PAYLOAD_BYTES:  # a character is at most 4 bytes: no need to encode
        return
    size = sum(len(a.encode()) for a in command) + sum(
        len(k.encode()) + len(v.encode()) for k, v in env
    )
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidInput(
            f"command plus env is {size} bytes, over the {MAX_PAYLOAD_BYTES}-byte limit",
            limit=MAX_PAYLOAD_BYTES,
        )


class _JobFields(Protocol):
    """What a job and a template share (:func:`check_job_fields` checks them)."""

    @property
    def command(self) -> tuple[str, ...]: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def env(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def cwd(self) -> str: ...
    @property
    def on_failure(self) -> str | None: ...
    @property
    def http(self) -> web.HttpRequest | None: ...
    @property
    def payload(self) -> str | None: ...


def check_job_fields(job: _JobFields) -> None:
    """Refuse what the store could not keep or the executor could not start, with the
    limits of :mod:`jobctl.domain.limits` (the API's wire models apply the same ones)."""
    if job.payload is not None:
        _check_payload_job(job)
    elif job.http is None:
        _check_command(job.command)
    elif job.command:
        raise InvalidInput("a job runs either a command or an http request, not both")
    if not 1 <= job.max_attempts <= limits.MAX_ATTEMPTS:
        raise InvalidInput(f"max_attempts must be 1-{limits.MAX_ATTEMPTS}")
    if not limits.MIN_PRIORITY <= job.priority <= limits.MAX_PRIORITY:
        raise InvalidInput(f"priority must be {limits.MIN_PRIORITY} to {limits.MAX_PRIORITY}")
    t = job.timeout
    if t is not None and not limits.MIN_TIMEOUT <= t <= limits.MAX_TIMEOUT:
        raise InvalidInput(
            f"timeout must be {limits.MIN_TIMEOUT:g} to {limits.MAX_TIMEOUT:.0f} seconds",
            limit=limits.MIN_TIMEOUT,
        )
    if not (0 < len(job.queue) <= limits.MAX_QUEUE_NAME and clean_text(job.queue)):
        raise InvalidInput(f"queue must be 1-{limits.MAX_QUEUE_NAME} characters, without NUL")
    if not (job.cwd.startswith("/") and len(job.cwd) <= limits.MAX_CWD and clean_text(job.cwd)):
        raise InvalidInput(f"cwd must be an absolute path of 1-{limits.MAX_CWD} characters")
    for name, value in job.env:
        check_env_name(name)
        if not clean_text(value):
            raise InvalidInput(f"environment variable {name!r}: the value holds a NUL byte")
    check_payload(job.command, job.env)
    check_on_failure(job.on_failure)


def _check_payload_job(job: _JobFields) -> None:
    """A payload job (docs/workers.md) is run by a worker: no command, request,
    environment or failure notifier of the daemon's."""
    from jobctl.domain.workers import check_payload_text

    if job.command or job.http is not None:
        raise InvalidInput("a job runs a command, an http request or a payload, only one")
    if job.env or job.on_failure is not None:
        raise InvalidInput("a payload job takes no environment or on_failure")
    check_payload_text(job.payload or "")


def check_on_failure(on_failure: str | None) -> None:
    """A failure notifier: a shell command line of 1 to ``MAX_ON_FAILURE`` characters."""
    if on_failure is None:
        return
    if not (0 < len(on_failure) <= limits.MAX_ON_FAILURE and clean_text(on_failure)):
        raise InvalidInput(
            f"on_failure must be a command line of 1-{limits.MAX_ON_FAILURE} characters, "
            "without NUL"
        )


@functools.lru_cache(maxsize=4096)
def _check_template(template: JobTemplate, owner_uid: int) -> None:
    """:meth:`JobTemplate.check` (a refusal raises, so only templates that pass are kept):
    the checks of ``JobSpec.__post_init__`` but the key's (a template has none), made on
    the template itself. Building a throw-away JobSpec to run them cost about 6 µs a
    schedule, a tenth of a batch item (a test holds the two equal)."""
    del owner_uid  # a key of the memo only: no check depends on it
    check_job_fields(template)
    web.check_job(template)


def _check_command(command: tuple[str, ...]) -> None:
    if not command or not all(isinstance(a, str) for a in command):
        raise InvalidInput("command must be a non-empty list of strings")
    if not command[0]:
        raise InvalidInput("command[0] (the program) must not be empty")
    if not all(map(clean_text, command)):
        raise InvalidInput("command: an argument holds a NUL byte")


def check_env_name(name: str) -> None:
    """An environment variable name a job may set (the ``JOBCTL_`` names are the daemon's)."""
    if (
        not name
        or "=" in name
        or not clean_text(name)
        or name.startswith(limits.RESERVED_ENV_PREFIX)
    ):
        raise InvalidInput(f"invalid environment variable name {name!r}")


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

    Generated the way dataclasses generate ``__init__``: a loop over the field names
    with ``getattr``/``setattr`` cost several µs per spec, a measurable share of a batch
    enqueue, where this costs about one.
    """
    lines = [f"def {name}({params}):", "    spec = new(JobSpec)"]
    lines += [f"    put(spec, {field!r}, {values[field]})" for field in _SPEC_FIELDS]
    lines.append("    return spec")
    scope: dict[str, Any] = {"new": object.__new__, "put": object.__setattr__, "JobSpec": JobSpec}
    exec("\n".join(lines), scope)  # the source is built above from the field names only
    fn: Callable[..., JobSpec] = scope[name]
    return fn


#: ``trusted_spec(**fields)``: a JobSpec from fields that were validated before (an
#: earlier JobSpec wrote them, or the API model checked them and :func:`check_payload`
#: the size), without ``__post_init__``. Every field must be given, by name.
trusted_spec = _compile(
    "trusted_spec", "*, " + ", ".join(_SPEC_FIELDS), {f: f for f in _SPEC_FIELDS}
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


#: The version of :func:`fingerprint_of`: the prefix of every fingerprint it makes. A
#: stored fingerprint without it was made by an older rule (before 0.x: a digest of a
#: positional list whose length grew with the fields); the store compares such a job by
#: the fields of its row instead (:func:`jobctl.store.jobrow.same_body`).
FINGERPRINT_VERSION = "2"
_FP_PREFIX = FINGERPRINT_VERSION + ":"


def is_current_fingerprint(fingerprint: str) -> bool:
    """Whether ``fingerprint`` was made by today's :func:`fingerprint_of`."""
    return fingerprint.startswith(_FP_PREFIX)


class _BodyFields(_JobFields, Protocol):
    @property
    def backoff(self) -> Backoff: ...
    @property
    def retry_on(self) -> tuple[int, ...] | None: ...
    @property
    def no_retry_on(self) -> tuple[int, ...]: ...
    @property
    def resources(self) -> Resources | None: ...


def fingerprint_fields(
    job: _BodyFields, owner_uid: int, schedule_id: str | None
) -> dict[str, object]:
    """The fields a fingerprint covers, by name, in the form the store keeps them (times
    in whole milliseconds, exit codes as lists, the environment sorted), so the same
    fields come back from a stored row (:func:`jobctl.store.jobrow.row_fingerprint`).
    ``resources`` and ``on_failure`` are there only when set, so a job without them keeps
    the digest it had before they existed."""
    fields: dict[str, object] = {
        "backoff_base_ms": int(round(job.backoff.base * 1000)),
        "backoff_cap_ms": int(round(job.backoff.cap * 1000)),
        "command": list(job.command),
        "cwd": job.cwd,
        "env": sorted(job.env),
        "max_attempts": job.max_attempts,
        "no_retry_on": list(job.no_retry_on),
        "owner_uid": owner_uid,
        "priority": job.priority,
        "queue": job.queue,
        "retry_on": None if job.retry_on is None else list(job.retry_on),
        "schedule_id": schedule_id,
        "timeout_ms": None if job.timeout is None else int(round(job.timeout * 1000)),
    }
    if job.resources:
        fields["resources"] = job.resources.to_json()
    if job.on_failure is not None:
        fields["on_failure"] = job.on_failure
    if job.http is not None:
        fields["http"] = job.http.to_json()
    if job.payload is not None:
        fields["payload"] = job.payload
    return fields


def fingerprint_of(fields: dict[str, object]) -> str:
    """The canonical fingerprint of a job body: ``"2:"`` and 32 hex digits of SHA-256 over
    the fields as compact JSON with sorted keys, ASCII only.

    Why canonical and versioned: a stored fingerprint must stay comparable across
    releases and backends. Named fields (not positions) and a fixed rendering mean a new
    field changes no old digest unless it is set; the version says which rule made it
    (a test pins a literal value, so the rule cannot drift unnoticed).
    """
    return _FP_PREFIX + _digest(_canonical(fields))


def _canonical(fields: dict[str, object]) -> str:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


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


@dataclass(frozen=True, slots=True)
class Attempt:
    job_id: int
    number: int
    generation: int
    started_at: datetime
    finished_at: datetime | None
    outcome: Outcome | None
    exit_code: int | None
    error: str | None
    output_tail: str
    log_path: str | None
    pid: int | None
    lease_owner: str
    #: An http job's attempt: the answer's status, the call's latency and the SHA-256
    #: (hex) of the exact body bytes sent and signed.
    http_status: int | None = None
    latency_ms: int | None = None
    body_sha256: str | None = None


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    key: str
    spec: JobSpec
    status: JobStatus
    run_at: datetime
    created_at: datetime
    attempt: int
    failures: int
    generation: int
    lease_owner: str | None
    lease_until: datetime | None
    finished_at: datetime | None
    last_error: str | None
    dead_reason: str | None
    attempts: tuple[Attempt, ...] = ()
    #: What the failure notification did (engine/notifier.py), as stored: a JSON object
    #: text, or None when none ran.
    notified: str | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """A job handed to an executor: run it under ``generation`` until ``lease_until``."""

    job: Job
    attempt: int
    generation: int
    lease_until: datetime


@dataclass(frozen=True, slots=True)
class AttemptResult:
    outcome: Outcome
    exit_code: int | None = None
    error: str | None = None
    output_tail: str = ""
    #: A failure no retry can mend (its owner may no longer run jobs): the job is dead
    #: with this reason whatever budget it has left.
    dead_reason: DeadReason | None = None
    #: The command could not be started for want of a resource (descriptors, memory,
    #: disk): retried with backoff and without using the budget (domain/retry.py).
    transient: bool = False
    #: Size of the attempt's log file when it ended (accounted in ``status``).
    log_bytes: int = 0
    #: A receiver's ``Retry-After`` (seconds, bounded): the retry waits at least this.
    retry_after: float | None = None
    #: An http job's attempt (:class:`Attempt`'s fields of the same names).
    http_status: int | None = None
    latency_ms: int | None = None
    body_sha256: str | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    """What a committed finish did to its job: the few fields the executor reports.

    Lean on purpose (no spec, no attempts): ``Store.finish_many`` returns one per item and
    building a full :class:`Job` per finished attempt was a measurable share of a drain.
    """

    job_id: int
    status: JobStatus
    run_at: datetime
    failures: int
    dead_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """An attempt's process, for ``Store.record_processes`` (crash recovery stops it)."""

    job_id: int
    generation: int
    pid: int
    pid_start: int | None
    log_path: str


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    scheduled: int
    due: int
    running: int
    succeeded: int
    dead: int
    cancelled: int
    oldest_due: datetime | None


@dataclass(frozen=True, slots=True)
class Orphan:
    """A running attempt whose daemon died; its process may still be alive."""

    job_id: int
    generation: int
    lease_owner: str
    pid: int | None
    pid_start: int | None
