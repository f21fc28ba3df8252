"""Wire models of the HTTP API (also the source of its OpenAPI document).

Requests forbid unknown fields: a typo such as ``max_attempt`` is a 422, not a job that
silently ignores what the caller meant.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)
from typing_extensions import TypeAliasType

from jobctl.api.http_schemas import IPV6_PATTERN, URL_PATTERN, HeaderValue, HttpIn
from jobctl.api.views import attempt_out, job_out, queue_out
from jobctl.api.wiretypes import (
    NUMBER,
    STRICT,
    TIME_SCHEMA,
    CpuQuota,
    ExitCode,
    JobId,
    MemoryMax,
    NewQueueName,
    Nice,
    OnFailure,
    QueueName,
    Seconds,
    Text,
    Timeout,
    json_number,
    require_offset,
    since_time,
    time_text,
)
from jobctl.domain import limits
from jobctl.domain import resources as res
from jobctl.domain import workers as wk
from jobctl.domain.models import (
    Backoff,
    JobSpec,
    JobTemplate,
    check_env_name,
    check_payload,
    fields_spec,
)
from jobctl.domain.retry import DEFAULT_RETRY, RetryDefaults
from jobctl.domain.states import DeadReason
from jobctl.domain.workers import payload_text
from jobctl.errors import InvalidInput

#: Re-exported: the shared wire types, the http request model and the answers lived here
#: before, and the routes import them from this module.
__all__ = [
    "IPV6_PATTERN",
    "NUMBER",
    "STRICT",
    "TIME_SCHEMA",
    "URL_PATTERN",
    "BackoffIn",
    "CpuQuota",
    "EnqueueBody",
    "ExitCode",
    "HeaderValue",
    "HttpIn",
    "JobId",
    "JobIn",
    "JobTemplateIn",
    "MemoryMax",
    "Nice",
    "OnFailure",
    "QueueIn",
    "QueueName",
    "ReplayIn",
    "Seconds",
    "Text",
    "Timeout",
    "attempt_out",
    "http_without_command",
    "job_out",
    "json_number",
    "queue_out",
    "refuse_beside_payload",
    "require_offset",
    "since_time",
    "time_text",
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


_HTTP_SET = {"required": ["http"], "properties": {"http": {"type": "object"}}}
_COMMAND_SET = {"required": ["command"], "properties": {"command": {"type": "array"}}}
_PayloadNumber = (
    Annotated[StrictInt, Field(gt=-wk.MAX_PAYLOAD_NUMBER, lt=wk.MAX_PAYLOAD_NUMBER)]
    | Annotated[StrictFloat, Field(gt=-wk.MAX_PAYLOAD_NUMBER, lt=wk.MAX_PAYLOAD_NUMBER)]
)
#: A payload's JSON: any value, numbers strictly inside +-2^53 (jobctl.domain.workers):
#: a float at the bound cannot be told from a JSON integer past it that rounded onto it,
#: and in JSON (and the OpenAPI document) 2^53 and 2^53.0 are one number, so the integer
#: is refused there too (schemathesis found the document promising 2^53.0).
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
    queue: NewQueueName = "default"
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
            "resources": (
                None  # what an empty Resources is (its bool), without building one
                if self.nice is None and self.memory_max is None and self.cpu_quota is None
                else res.Resources(self.nice, self.memory_max, self.cpu_quota)
            ),
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
        if fields["http"] is None and fields["payload"] is None:
            return fields_spec(fields, run_at, self.key, owner_uid)
        # An http or payload job is checked in full (JobSpec's __post_init__): not the
        # hot path.
        return JobSpec(
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
