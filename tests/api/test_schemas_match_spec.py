"""JobIn.to_spec builds specs without JobSpec's own checks: the wire model's constraints
must refuse everything JobSpec refuses, or a bad job would reach the store unchecked."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from jobctl.api.schemas import JobIn
from jobctl.domain.limits import MAX_PAYLOAD_BYTES
from jobctl.domain.models import Backoff, JobSpec
from jobctl.errors import InvalidInput

NOW = datetime(2027, 3, 14, 6, 0, tzinfo=UTC)
GOOD: dict[str, Any] = {"command": ["echo", "hi"]}


@pytest.mark.parametrize(
    "field, value",
    [
        ("command", []),
        ("command", ["ok", 3]),
        ("max_attempts", 0),
        ("timeout", 0),
        ("timeout", -1.5),
        ("queue", ""),
        ("queue", "q" * 101),
        ("key", ""),
        ("key", "k" * 513),
        ("key", "k\0"),
        ("command", [""]),
        ("command", ["echo", "a\0b"]),
        ("timeout", 1e-9),
        ("timeout", 0.0004),
        ("timeout", 86400 * 366),
        ("queue", "q\0"),
        ("priority", 1001),
        ("max_attempts", 1001),
        ("cwd", "relative"),
        ("cwd", "/a\0b"),
        ("env", {"A=B": "x"}),
        ("env", {"A": "x\0"}),
        ("env", {"JOBCTL_JOB_ID": "1"}),
    ],
)
def test_what_jobspec_refuses_the_wire_model_refuses(field: str, value: Any) -> None:
    spec_field = field
    spec_value = tuple(value) if field == "command" else value
    if field == "env":
        spec_value = tuple(sorted(value.items()))
    fields: dict[str, Any] = {"command": ("echo",), "run_at": NOW, "owner_uid": 1}
    with pytest.raises(InvalidInput):
        JobSpec(**{**fields, spec_field: spec_value})
    with pytest.raises(ValidationError):
        JobIn.model_validate({**GOOD, field: value})


@pytest.mark.parametrize(
    "body",
    [
        GOOD,
        {**GOOD, "key": "k" * 512, "queue": "q" * 100, "max_attempts": 1, "timeout": 0.001},
        {**GOOD, "env": {"B": "2", "A": "1"}, "retry_on": [3, 1, 3], "no_retry_on": [2]},
        {**GOOD, "backoff": {"base": 5, "cap": 1}, "run_at": "2027-03-14T15:00:00+09:00"},
    ],
)
def test_to_spec_equals_a_checked_jobspec(body: dict[str, Any]) -> None:
    spec = JobIn.model_validate(body).to_spec(1000, NOW)
    checked = JobSpec(
        command=spec.command,
        run_at=spec.run_at,
        owner_uid=1000,
        key=spec.key,
        queue=spec.queue,
        priority=spec.priority,
        max_attempts=spec.max_attempts,
        timeout=spec.timeout,
        backoff=Backoff(spec.backoff.base, spec.backoff.cap),
        env=spec.env,
        cwd=spec.cwd,
        retry_on=spec.retry_on,
        no_retry_on=spec.no_retry_on,
    )
    assert spec == checked and spec.fingerprint() == checked.fingerprint()
    assert spec.run_at.tzinfo is UTC and spec.schedule_id is None and spec.scheduled_for is None


def test_an_oversized_payload_is_refused_by_to_spec() -> None:
    body = JobIn.model_validate({"command": ["echo"], "env": {"BIG": "é" * MAX_PAYLOAD_BYTES}})
    with pytest.raises(InvalidInput, match="over the 65536-byte limit"):
        body.to_spec(1000, NOW)
