"""Wire models of the HTTP API (also the source of its OpenAPI document).

Requests forbid unknown fields: a typo such as ``max_attempt`` is a 422, not a job that
silently ignores what the caller meant.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)
from typing_extensions import TypeAliasType

from jobctl.domain import http as web
from jobctl.domain import limits
from jobctl.domain import resources as res
from jobctl.domain import workers as wk
from jobctl.domain.clock import iso
from jobctl.domain.models import (
    Attempt,
    Backoff,
    Job,
    JobSpec,
    JobTemplate,
    QueueStats,
    check_env_name,
    check_payload,
    trusted_spec,
)
from jobctl.domain.retry import DEFAULT_RETRY, RetryDefaults
from jobctl.domain.states import DeadReason
from jobctl.domain.workers import payload_text
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


def _env_schema(schema: dict[str, Any]) -> None:
    """``env`` in the OpenAPI document: names and values as :func:`check_env_name` wants."""
    schema.pop("patternProperties", None)
    schema["propertyNames"] = {
        "pattern": limits.ENV_NAME_PATTERN,
        "not": {"pattern": f"^{limits.RESERVED_ENV_PREFIX}"},
    }
    schema["additionalProperties"] = {"type": "string", "pattern": limits.TEXT_PATTERN}


def _command_schema(schema: dict[str, Any]) -> None:
    """``command`` in the OpenAPI document: the program (the first item) is not empty."""
    item = {"type": "string", "pattern": limits.NONEMPTY_TEXT_PATTERN}
    schema["prefixItems"] = [item]


def _valid_env_name(name: str) -> bool:
    try:
        check_env_name(name)
    except InvalidInput:
        return False
    return True


class BackoffIn(BaseModel):
    model_config = STRICT
    base: Seconds = 10.0
    cap: Seconds = 3600.0


def _ci(name: str) -> str:
    """A regex of ``name`` in any case, without flags (JSON Schema's regexes have none)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in name)


_H16 = "[0-9A-Fa-f]{1,4}"
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#: An IPv6 address in any of its written forms (RFC 4291 2.2: full, "::"-compressed, or
#: IPv4-mapped), no zone.
IPV6_PATTERN = "|".join(
    (
        f"({_H16}:){{7}}{_H16}",
        f"({_H16}:){{1,7}}:",
        f"({_H16}:){{1,6}}:{_H16}",
        *(f"({_H16}:){{1,{n}}}(:{_H16}){{1,{7 - n}}}" for n in range(5, 0, -1)),
        f":((:{_H16}){{1,7}}|:)",
        rf"::[fF]{{4}}:({_OCTET}\.){{3}}{_OCTET}",
    )
)
#: A URL the API takes: http(s), a host name, an IPv4 address or an IPv6 one in brackets,
#: a port up to 65535, then printable ASCII (what jobctl.domain.http accepts, written so the
#: document says it).
URL_PATTERN = (
    rf"^https?://([A-Za-z0-9.-]+|\[({IPV6_PATTERN})\])"
    r"(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?"
    r"([/?#][!-~]*)?$"
)
_RESERVED = "^(" + "|".join(_ci(n) for n in sorted(web.RESERVED_HEADERS)) + ")$"
HeaderValue = Annotated[str, Field(max_length=web.MAX_HEADER_VALUE, pattern=r"^[^\r\n\x00]*$")]


def _headers_schema(schema: dict[str, Any]) -> None:
    """``headers`` in the OpenAPI document: token names, not the daemon's own."""
    schema["propertyNames"] = {"pattern": web.HEADER_NAME.pattern, "not": {"pattern": _RESERVED}}


class HttpIn(BaseModel):
    """An http job's request (docs/webhooks.md): sent, signed, instead of a command."""

    model_config = STRICT
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    url: Annotated[str, Field(min_length=1, max_length=web.MAX_URL, pattern=URL_PATTERN)]
    headers: Annotated[
        dict[str, HeaderValue],
        Field(max_length=web.MAX_HEADERS, json_schema_extra=_headers_schema),
    ] = Field(default_factory=dict)
    body: Annotated[
        str, Field(max_length=limits.MAX_PAYLOAD_BYTES, pattern=limits.TEXT_PATTERN)
    ] = ""
    #: 4xx statuses retried (by default a 4xx but 429 is dead at once; 410 always is).
    retry_on: list[
        Annotated[int, Field(ge=400, le=499, json_schema_extra={"not": {"const": 410}}), NUMBER]
    ] = Field(default_factory=list)
    #: The owner's signing secret (jobctl secrets); unset: "default" if it exists.
    secret: Annotated[str, Field(pattern=web.SECRET_NAME.pattern)] | None = None

    def to_request(self) -> web.HttpRequest:
        """The checked request (InvalidInput, a 422, for what the field rules let pass)."""
        return web.HttpRequest(
            method=self.method,
            url=self.url,
            headers=tuple(sorted(self.headers.items())),
            body=self.body,
            retry_on=tuple(sorted(set(self.retry_on))),
            secret=self.secret,
        )


_HTTP_SET = {"required": ["http"], "properties": {"http": {"type": "object"}}}
_COMMAND_SET = {"required": ["command"], "properties": {"command": {"type": "array"}}}
_PayloadNumber = (
    Annotated[StrictInt, Field(ge=-wk.MAX_PAYLOAD_NUMBER, le=wk.MAX_PAYLOAD_NUMBER)]
    | Annotated[StrictFloat, Field(gt=-wk.MAX_PAYLOAD_NUMBER, lt=wk.MAX_PAYLOAD_NUMBER)]
)
#: A payload's JSON: any value, numbers within +-2^53 (jobctl.domain.workers); a float
#: strictly inside: a JSON integer past 2^53 read as a float rounds onto the bound.
PayloadValue = TypeAliasType(
    "PayloadValue",
    "dict[str, PayloadValue] | list[PayloadValue] | StrictStr | StrictBool | _PayloadNumber | None",
)
#: A payload job's body (docs/workers.md): any JSON but null.
_PAYLOAD_SET = {"required": ["payload"], "properties": {"payload": {"not": {"type": "null"}}}}
#: Settings of a command that an http job refuses (jobctl.domain.http.check_job).
COMMAND_ONLY: list[dict[str, Any]] = [
    {"required": [name], "properties": {name: kind}}
    for name, kind in (
        ("retry_on", {"type": "array", "minItems": 1}),
        ("no_retry_on", {"type": "array", "minItems": 1}),
        ("env", {"type": "object", "minProperties": 1}),
        ("nice", {"type": "integer"}),
        ("memory_max", {"type": "integer"}),
        ("cpu_quota", {"type": "number"}),
    )
]


_ON_FAILURE_SET = {"required": ["on_failure"], "properties": {"on_failure": {"type": "string"}}}


def _one_body(schema: dict[str, Any]) -> None:
    """In the OpenAPI document: ``command`` or ``http``, and an http job without the
    settings of a command."""
    schema["oneOf"] = [
        {"allOf": [_COMMAND_SET, {"not": _HTTP_SET}, {"not": _PAYLOAD_SET}]},
        {
            "allOf": [
                _HTTP_SET,
                {"not": _COMMAND_SET},
                {"not": _PAYLOAD_SET},
                {"not": {"anyOf": COMMAND_ONLY}},
            ]
        },
        {
            "allOf": [
                _PAYLOAD_SET,
                {"not": _COMMAND_SET},
                {"not": _HTTP_SET},
                {"not": {"anyOf": [*COMMAND_ONLY, _ON_FAILURE_SET]}},
            ]
        },
    ]


def http_without_command(schema: dict[str, Any]) -> None:
    """A template patch: not two bodies, and no command settings beside ``http`` (nor
    those or ``on_failure`` beside ``payload``)."""
    schema["not"] = {
        "anyOf": [
            {"allOf": [_COMMAND_SET, _HTTP_SET]},
            {"allOf": [_HTTP_SET, {"anyOf": COMMAND_ONLY}]},
            {
                "allOf": [
                    _PAYLOAD_SET,
                    {"anyOf": [_COMMAND_SET, _HTTP_SET, *COMMAND_ONLY, _ON_FAILURE_SET]},
                ]
            },
        ]
    }


def refuse_beside_payload(t: JobTemplateIn) -> None:
    """A payload job's body (or patch) has none of a command's settings nor ``on_failure``
    (what the OpenAPI document's ``COMMAND_ONLY`` and ``on_failure`` rules say)."""
    if t.payload is None:
        return
    bad = [
        name
        for name, v in (
            ("env", t.env),
            ("retry_on", t.retry_on),
            ("no_retry_on", t.no_retry_on),
            ("nice", t.nice is not None),
            ("memory_max", t.memory_max is not None),
            ("cpu_quota", t.cpu_quota is not None),
            ("on_failure", t.on_failure is not None),
        )
        if v
    ]
    if bad:
        raise ValueError(f"a payload job (a worker's) takes no {', '.join(bad)}")


class JobTemplateIn(BaseModel):
    """What a job runs and how: the body of a job, or the template of a schedule. A job
    runs either ``command`` or the ``http`` request (a webhook job), never both."""

    model_config = STRICT | {"json_schema_extra": _one_body}
    command: (
        Annotated[list[Text], Field(min_length=1, json_schema_extra=_command_schema)] | None
    ) = None
    http: HttpIn | None = None
    #: A payload job's JSON (docs/workers.md): leased by workers, at most 64 KiB.
    payload: PayloadValue = None
    queue: QueueName = "default"
    priority: Annotated[int, Field(ge=limits.MIN_PRIORITY, le=limits.MAX_PRIORITY), NUMBER] = 0
    max_attempts: Annotated[int, Field(ge=1, le=limits.MAX_ATTEMPTS), NUMBER] | None = (
        None  # None: daemon default
    )
    timeout: Timeout | None = None
    backoff: BackoffIn | None = None  # None: the daemon's default
    env: Annotated[dict[str, Text], Field(json_schema_extra=_env_schema)] = Field(
        default_factory=dict
    )  # a factory: no deepcopy per job
    cwd: Annotated[
        str, Field(min_length=1, max_length=limits.MAX_CWD, pattern=limits.PATH_PATTERN)
    ] = "/"
    retry_on: list[ExitCode] | None = None
    no_retry_on: list[ExitCode] = Field(default_factory=list)
    #: Resource limits (domain/resources.py): niceness, memory.max bytes, % of one CPU.
    nice: Nice | None = None
    memory_max: MemoryMax | None = None
    cpu_quota: CpuQuota | None = None
    #: A shell command line run (as the owner) when the job ends dead (engine/notifier.py).
    on_failure: OnFailure | None = None

    @field_validator("command")
    @classmethod
    def _program(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v[0]:
            raise ValueError("the program (the first item) must not be empty")
        return v

    @model_validator(mode="after")
    def _one_body(self) -> JobTemplateIn:
        given = (self.command is not None) + (self.http is not None) + (self.payload is not None)
        if given != 1:
            raise ValueError(
                "give either command or http (a webhook job) or payload (a worker's job): one"
            )
        refuse_beside_payload(self)
        return self

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not _valid_env_name(name):
                raise ValueError(f"invalid environment variable name {name!r}")
        return v

    def to_template(self, defaults: RetryDefaults = DEFAULT_RETRY) -> JobTemplate:
        """The job template, with the daemon's retry defaults where the caller said nothing."""
        return JobTemplate(**self._job_fields(defaults))

    def _job_fields(self, defaults: RetryDefaults) -> dict[str, Any]:
        """The fields a template and a job share, defaults filled in."""
        backoff = defaults.backoff
        if self.backoff is not None:
            backoff = Backoff(self.backoff.base, max(self.backoff.cap, self.backoff.base))
        return {
            "command": tuple(self.command or ()),
            "queue": self.queue,
            "priority": self.priority,
            "max_attempts": self.max_attempts or defaults.max_attempts,
            "timeout": self.timeout,
            "backoff": backoff,
            "env": tuple(sorted(self.env.items())) if self.env else (),
            "cwd": self.cwd,
            "retry_on": None if self.retry_on is None else tuple(sorted(set(self.retry_on))),
            "no_retry_on": tuple(sorted(set(self.no_retry_on))) if self.no_retry_on else (),
            "resources": res.Resources(self.nice, self.memory_max, self.cpu_quota) or None,
            "on_failure": self.on_failure,
            "http": None if self.http is None else self.http.to_request(),
            "payload": None if self.payload is None else payload_text(self.payload),
        }


class JobIn(JobTemplateIn):
    """A job to enqueue. ``run_at`` defaults to now; times need an offset (or ``Z``)."""

    run_at: Annotated[datetime, Field(json_schema_extra=TIME_SCHEMA)] | None = None
    key: (
        Annotated[
            str,
            Field(min_length=1, max_length=limits.MAX_KEY, pattern=limits.NONEMPTY_TEXT_PATTERN),
        ]
        | None
    ) = None

    _text = field_validator("run_at", mode="before")(time_text)
    _aware = field_validator("run_at")(require_offset)

    def to_spec(
        self, owner_uid: int, now: datetime, defaults: RetryDefaults = DEFAULT_RETRY
    ) -> JobSpec:
        run_at = (self.run_at or now).astimezone(UTC)
        fields = self._job_fields(defaults)
        # Every check JobSpec.__post_init__ makes, this model's field constraints made
        # already (tests/api/test_schemas_match_spec.py holds them equal), except the size.
        check_payload(fields["command"], fields["env"])
        # An http job is checked in full (JobSpec's __post_init__): not the hot path.
        make = trusted_spec if fields["http"] is None and fields["payload"] is None else JobSpec
        return make(
            run_at=run_at,
            key=self.key,
            owner_uid=owner_uid,
            schedule_id=None,
            scheduled_for=None,
            **fields,
        )


#: The body of ``POST /v1/jobs``: one job, or a batch of 1 to ``MAX_BATCH``.
EnqueueBody = JobIn | Annotated[list[JobIn], Field(min_length=1, max_length=limits.MAX_BATCH)]


class ReplayIn(BaseModel):
    """Which dead jobs to replay, and how fast to release them (jobs per second)."""

    model_config = STRICT
    limit: Annotated[int, Field(ge=1, le=limits.MAX_REPLAY), NUMBER] = 10
    ids: Annotated[list[JobId], Field(max_length=limits.MAX_REPLAY)] | None = None
    queue: QueueName | None = None
    reason: DeadReason | None = None
    rate: Annotated[StrictFloat, Field(ge=limits.MIN_RATE, le=limits.MAX_REPLAY_RATE)] | None = 1.0
    #: Without ids: everyone's dead jobs, not only the caller's (admins only).
    all_users: StrictBool = False


class QueueIn(BaseModel):
    """Queue limits to change; a field left out keeps its value, null removes the limit."""

    model_config = STRICT
    concurrency: Annotated[int, Field(ge=1, le=limits.MAX_QUEUE_CONCURRENCY), NUMBER] | None = None
    rate: Annotated[StrictFloat, Field(ge=limits.MIN_RATE, le=limits.MAX_QUEUE_RATE)] | None = None
    burst: Annotated[int, Field(ge=1, le=limits.MAX_QUEUE_BURST), NUMBER] = 1
    weight: Annotated[int, Field(ge=1, le=limits.MAX_QUEUE_WEIGHT), NUMBER] = 1
    #: Defaults of the queue's jobs (domain/queue_defaults.py): a job's own value wins.
    nice: Nice | None = None
    memory_max: MemoryMax | None = None
    cpu_quota: CpuQuota | None = None
    on_failure: OnFailure | None = None


def attempt_out(a: Attempt) -> dict[str, Any]:
    return {
        "number": a.number,
        "generation": a.generation,
        "started_at": iso(a.started_at),
        "finished_at": iso(a.finished_at),
        "outcome": a.outcome.value if a.outcome else None,
        "exit_code": a.exit_code,
        "error": a.error,
        "output_tail": a.output_tail,
        "output_cut": "[jobctl: output cut at " in a.output_tail,  # engine.process.CUT_MARK
        "pid": a.pid,
        "lease_owner": a.lease_owner,
    } | (
        {"http_status": a.http_status, "latency_ms": a.latency_ms, "body_sha256": a.body_sha256}
        if a.body_sha256 is not None
        else {}
    )


def job_out(job: Job, with_attempts: bool = False) -> dict[str, Any]:
    s = job.spec
    out: dict[str, Any] = {
        "id": job.id,
        "key": job.key,
        "queue": s.queue,
        "status": job.status.value,
        "run_at": iso(job.run_at),
        "priority": s.priority,
        "attempt": job.attempt,
        "max_attempts": s.max_attempts,
        "failures": job.failures,
        "command": list(s.command),
        "env": dict(s.env),
        "cwd": s.cwd,
        "timeout": s.timeout,
        "backoff": {"base": s.backoff.base, "cap": s.backoff.cap},
        "owner_uid": s.owner_uid,
        "created_at": iso(job.created_at),
        "generation": job.generation,
        "lease_owner": job.lease_owner,
        "lease_until": iso(job.lease_until),
        "finished_at": iso(job.finished_at),
        "retry_on": None if s.retry_on is None else list(s.retry_on),
        "no_retry_on": list(s.no_retry_on),
        "resources": s.resources.to_json() if s.resources else {},
        "http": None if s.http is None else s.http.to_json(),
        "payload": None if s.payload is None else json.loads(s.payload),
        "schedule_id": s.schedule_id,
        "scheduled_for": iso(s.scheduled_for),
        "last_error": job.last_error,
        "dead_reason": job.dead_reason,
        "on_failure": s.on_failure,
        "notified": None if job.notified is None else json.loads(job.notified),
    }
    if with_attempts:
        out["attempts"] = [attempt_out(a) for a in job.attempts]
    return out


def queue_out(q: QueueStats, now: datetime) -> dict[str, Any]:
    age = None if q.oldest_due is None else max(0.0, (now - q.oldest_due).total_seconds())
    return {
        "queue": q.queue,
        "waiting": q.scheduled,
        "due": q.due,
        "running": q.running,
        "succeeded": q.succeeded,
        "dead": q.dead,
        "cancelled": q.cancelled,
        "oldest_due_age": age,
    }
