"""Action and target names of the audit trail, derived from routes (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobctl.cli.humantime import since as _since
from jobctl.domain.audit import MAX_TARGET, action_for, clip, jobs_target, target_for


@pytest.mark.parametrize(
    "method, template, action",
    [
        ("POST", "/v1/jobs/{job_id}/cancel", "jobs.cancel"),
        ("POST", "/v1/jobs", "jobs.enqueue"),
        ("POST", "/v1/schedules", "schedules.create"),
        ("DELETE", "/v1/schedules/{ref}", "schedules.delete"),
        ("POST", "/v1/schedules/{ref}/trigger", "schedules.trigger"),
        ("PATCH", "/v1/queues/{name}", "queues.set"),
        ("POST", "/v1/dlq/replay", "dlq.replay"),
        ("DELETE", "/v1/dlq", "dlq.purge"),
        ("POST", "/v1/prune", "jobs.prune"),
        ("GET", "/v1/jobs/{job_id}", "jobs.read"),
        ("GET", "/v1/jobs/{job_id}/attempts/{number}/log", "jobs.attempts.log"),
        ("PUT", None, "unrouted.replace"),
    ],
)
def test_actions_come_from_method_and_template(
    method: str, template: str | None, action: str
) -> None:
    assert action_for(method, template) == action


def test_targets() -> None:
    assert target_for({"job_id": 7}) == "job:7"
    assert target_for({"job_id": 7, "number": 2}) == "job:7 attempt:2"
    assert target_for({"ref": "nightly"}) == "schedule:nightly"
    assert target_for({"name": "mail"}, "/v1/queues/{name}/pause") == "queue:mail"
    # a secret's name was recorded as a queue's: "secrets.rotate queue:default"
    assert target_for({"name": "hooks"}, "/v1/secrets/{name}/rotate") == "secret:hooks"
    assert target_for({"name": "hooks"}, "/v1/secrets/{name}") == "secret:hooks"
    assert jobs_target([5]) == "job:5" and jobs_target([9, 5, 7]) == "jobs:5..9 n=3"
    assert clip("a\nb") == "a?b" and len(clip("x" * 1000)) == MAX_TARGET


def test_since_takes_a_duration_or_a_time() -> None:
    ago = datetime.fromisoformat(_since("1h"))
    assert abs((datetime.now(UTC) - ago) - timedelta(hours=1)) < timedelta(minutes=1)
    assert _since("2027-03-14T06:00:00Z") == "2027-03-14T06:00:00+00:00"
