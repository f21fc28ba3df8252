"""Wire model of a schedule edit (``PATCH /v1/schedules/{ref}``): a JSON merge.

Only the fields given change; everything else is kept. The field types are those of
:class:`~jobctl.api.schedule_schemas.ScheduleIn`, so an edit meets the same input limits
as a create. ``cron`` replaces an ``every`` timing and ``every`` a cron one (an ``every``
set on a cron schedule is anchored at ``at``, else now; on an ``every`` schedule it keeps
its anchor unless ``at`` is given). ``null`` keeps a field, except ``name: null``, which
removes the name, and the template fields whose null means the daemon's default or none
(``max_attempts``, ``backoff``, ``timeout``, ``retry_on``). ``job`` is merged into the
template field by field (``env`` as a whole), then checked as a create's is.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from jobctl.api.errors import field_problem
from jobctl.api.schedule_schemas import (
    AnchorTime,
    CatchUpLimit,
    CronText,
    EverySeconds,
    JitterSeconds,
    ScheduleName,
    ZoneText,
)
from jobctl.api.schemas import (
    JobTemplateIn,
    _command_schema,
    http_without_command,
    refuse_beside_payload,
)
from jobctl.api.wiretypes import STRICT, Text, require_offset, time_text
from jobctl.domain.clock import iso
from jobctl.domain.models import JobTemplate
from jobctl.domain.retry import DEFAULT_RETRY, RetryDefaults
from jobctl.domain.schedule import Misfire, Overlap, Policy, ScheduleEdit, ScheduleSpec, Timing
from jobctl.errors import Conflict, InvalidInput


def _not_both(schema: dict[str, Any]) -> None:
    """In the OpenAPI document: ``cron`` with neither ``every`` nor ``at``."""
    schema["not"] = {
        "anyOf": [
            {
                "required": ["cron", other],
                "properties": {"cron": {"type": "string"}, other: {"type": kind}},
            }
            for other, kind in (("every", "number"), ("at", "string"))
        ]
    }


#: What a command's template has and an http one does not (dropped when http replaces it).
_COMMAND_ONLY = frozenset(
    {"command", "env", "retry_on", "no_retry_on", "nice", "memory_max", "cpu_quota"}
)


def _refuse_command_settings(
    given: dict[str, Any], kind: str = "an http request", more: tuple[str, ...] = ()
) -> None:
    """Settings of a command on an http (or payload) job's template: the body is fine,
    the schedule's state is not (409), as for ``at`` on a cron schedule."""
    refused = _COMMAND_ONLY | set(more)
    bad = sorted(k for k, v in given.items() if k in refused and v not in (None, [], {}))
    if bad:
        raise Conflict(
            f"this schedule's job is {kind}: {', '.join(bad)} apply to a command "
            "(give command too to make it one)"
        )


_Command = Annotated[list[Text] | None, Field(min_length=1, json_schema_extra=_command_schema)]


class JobTemplatePatch(JobTemplateIn):
    """Fields of the template to change; ``command`` may be left out too. ``http`` on a
    command's template (or ``command`` on an http one) replaces the body, and drops the
    settings only the other kind has."""

    model_config = STRICT | {"json_schema_extra": http_without_command}

    #: None keeps the command (the merged template is checked again as a JobTemplateIn).
    command: _Command = None

    @model_validator(mode="after")
    def _one_body(self) -> JobTemplatePatch:
        if self.command is not None and self.http is not None:
            raise ValueError("give either command or http (a webhook job), not both")
        if self.payload is not None and (self.command is not None or self.http is not None):
            raise ValueError("give one of command, http or payload")
        refuse_beside_payload(self)
        return self


class SchedulePatch(BaseModel):
    """A schedule edit: the fields given replace the schedule's; the rest is kept."""

    model_config = STRICT | {"json_schema_extra": _not_both}
    cron: CronText | None = None
    every: EverySeconds | None = None
    at: AnchorTime | None = None
    tz: ZoneText | None = None
    name: ScheduleName | None = None
    misfire: Misfire | None = None
    catch_up_limit: CatchUpLimit | None = None
    overlap: Overlap | None = None
    jitter: JitterSeconds | None = None
    job: JobTemplatePatch | None = None

    _text = field_validator("at", mode="before")(time_text)
    _aware = field_validator("at")(require_offset)

    @model_validator(mode="after")
    def _one_timing(self) -> SchedulePatch:
        if self.cron is not None and self.every is not None:
            raise ValueError("give cron or every, not both")
        if self.cron is not None and self.at is not None:
            raise ValueError("at is the anchor of an every schedule, not of a cron one")
        return self

    def apply(
        self, old: ScheduleSpec, now: datetime, defaults: RetryDefaults = DEFAULT_RETRY
    ) -> ScheduleSpec:
        """The definition after this edit of ``old``."""
        p = old.policy
        policy = Policy(
            self.misfire or p.misfire,
            p.catch_up_limit if self.catch_up_limit is None else self.catch_up_limit,
            self.overlap or p.overlap,
            p.jitter if self.jitter is None else self.jitter,
        )
        name = self.name if "name" in self.model_fields_set else old.name
        template = self._template(old.template, defaults)
        template.check(old.owner_uid)
        return ScheduleSpec(self._timing(old.timing, now), policy, template, old.owner_uid, name)

    def _timing(self, old: Timing, now: datetime) -> Timing:
        tz = self.tz or old.tz
        if self.cron is not None:
            return Timing(tz, cron=self.cron)
        if self.every is not None:
            anchor = self.at or (old.anchor if old.every is not None else None)
            return Timing(tz, every=self.every, anchor=anchor or now.replace(microsecond=0))
        if self.at is not None:
            if old.every is None:  # the body is fine, the schedule's state is not: 409
                raise Conflict("at is the anchor of an every schedule; this one is cron")
            return Timing(tz, every=old.every, anchor=self.at)
        return Timing(tz, cron=old.cron, every=old.every, anchor=old.anchor)

    def _template(self, old: JobTemplate, defaults: RetryDefaults) -> JobTemplate:
        if self.job is None:
            return old
        given = self.job.model_dump(mode="json", exclude_unset=True)
        for body in ("command", "http", "payload"):
            if body in given and given[body] is None:
                del given[body]  # null: keep it (as for every field left out)
        base = old.to_json()
        if "http" in given or "payload" in given:  # an http or a payload job's now
            base = {k: v for k, v in base.items() if k not in _COMMAND_ONLY}
            base.pop("payload" if "http" in given else "http", None)
            if "payload" in given:
                base.pop("on_failure", None)  # a payload job's failures are its worker's
        elif "command" in given:
            base.pop("http", None)
            base.pop("payload", None)
        elif "http" in base:
            _refuse_command_settings(given)
        elif "payload" in base:
            _refuse_command_settings(given, "a payload for workers", ("on_failure",))
        merged = base | given
        kept_queue = "queue" not in given  # may predate the queue name rule: still editable
        try:
            checked = JobTemplateIn.model_validate_json(
                json.dumps(merged | {"queue": "default"} if kept_queue else merged)
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise InvalidInput(f"job.{where}: {field_problem(dict(first))}") from None
        template = checked.to_template(defaults)
        return dataclasses.replace(template, queue=old.queue) if kept_queue else template


def edit_out(e: ScheduleEdit) -> dict[str, Any]:
    return {
        "edited_at": iso(e.edited_at),
        "by_uid": e.editor_uid,
        "changes": {k: {"from": a, "to": b} for k, (a, b) in e.changes.items()},
        "next_before": iso(e.next_before),
        "next_after": iso(e.next_after),
        "cleared_broken": e.cleared_broken,
    }
