"""The API's job answer (:func:`jobctl.api.views.job_out`) renders as it always did.

``job_out`` was made cheaper for batch enqueues (times straight to the cached ISO
function, literals for a plain job's empty collections). :func:`reference_job_out` below
is the plain form it replaced, kept verbatim; for many generated jobs (every optional
field there or not, odd times and zones, webhooks, payloads, resources, attempts) the two
give equal dicts and the same bytes through the renderer the API uses
(:func:`jobctl.api.fast.rendered`), key order included.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobctl.api import fast
from jobctl.api.views import attempt_out, job_out
from jobctl.domain.clock import iso
from jobctl.domain.http import HttpRequest
from jobctl.domain.models import Backoff, Job, trusted_spec
from jobctl.domain.records import Attempt
from jobctl.domain.resources import Resources
from jobctl.domain.states import JobStatus, Outcome


def reference_job_out(job: Job, with_attempts: bool = False) -> dict[str, Any]:
    """``job_out`` as it was before batch rendering was made cheaper (the reference)."""
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


_ZONES = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
)
_TIME = st.builds(
    lambda t, tz: t.replace(tzinfo=UTC).astimezone(tz),
    st.datetimes(datetime(1970, 1, 2), datetime(8999, 12, 30)),
    _ZONES,
)
_MAYBE_TIME = st.none() | _TIME
_TEXT = st.text(max_size=6)
_HTTP = st.builds(
    HttpRequest,
    st.sampled_from(["POST", "PUT", "GET"]),
    st.sampled_from(["https://hooks.example/x", "http://127.0.0.1:8/y?a=1"]),
    st.sampled_from([(), (("X-A", "1"),)]),
    st.sampled_from(["", '{"a": 1}']),
    st.sampled_from([(), (409,)]),
    st.sampled_from([None, "s1"]),
)


@st.composite
def specs(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["command", "http", "payload"]))
    return trusted_spec(
        command=tuple(draw(st.lists(_TEXT, min_size=1, max_size=3))) if kind == "command" else (),
        run_at=draw(_TIME),
        owner_uid=draw(st.integers(0, 2**31)),
        key=draw(st.none() | _TEXT),
        queue=draw(st.sampled_from(["default", "q1", "é"])),
        priority=draw(st.integers(-1000, 1000)),
        max_attempts=draw(st.integers(1, 100)),
        timeout=draw(st.none() | st.floats(0.001, 1e6)),
        backoff=draw(
            st.builds(lambda a, b: Backoff(a, a + b), st.floats(0.1, 100), st.floats(0, 900))
        ),
        env=tuple(draw(st.dictionaries(_TEXT, _TEXT, max_size=2)).items()),
        cwd=draw(st.sampled_from(["/", "/tmp", "/ü"])),
        schedule_id=draw(st.none() | st.just("sch-1")),
        scheduled_for=draw(_MAYBE_TIME),
        retry_on=draw(st.none() | st.lists(st.integers(1, 255), max_size=3).map(tuple)),
        no_retry_on=tuple(draw(st.lists(st.integers(1, 255), max_size=3))),
        resources=draw(
            st.none()
            | st.builds(
                Resources,
                st.none() | st.integers(-20, 19),
                st.none() | st.integers(1 << 20, 1 << 40),
                st.none() | st.floats(1, 400),
            )
        ),
        on_failure=draw(st.none() | _TEXT),
        http=draw(_HTTP) if kind == "http" else None,
        payload=draw(st.sampled_from(['{"a": [1, 2]}', "null", '"x"']))
        if kind == "payload"
        else None,
    )


_ATTEMPT = st.builds(
    Attempt,
    job_id=st.just(1),
    number=st.integers(1, 5),
    generation=st.integers(1, 9),
    started_at=_TIME,
    finished_at=_MAYBE_TIME,
    outcome=st.none() | st.sampled_from(Outcome),
    exit_code=st.none() | st.integers(0, 255),
    error=st.none() | _TEXT,
    output_tail=st.sampled_from(["", "out", "x[jobctl: output cut at 1 MiB]"]),
    log_path=st.none() | st.just("/l"),
    pid=st.none() | st.integers(1, 99999),
    lease_owner=st.just("host:1"),
)


@st.composite
def jobs(draw: st.DrawFn) -> Job:
    return Job(
        id=draw(st.integers(1, 2**62)),
        key=draw(st.text(min_size=1, max_size=8)),
        spec=draw(specs()),
        status=draw(st.sampled_from(JobStatus)),
        run_at=draw(_TIME),
        created_at=draw(_TIME),
        attempt=draw(st.integers(0, 100)),
        failures=draw(st.integers(0, 100)),
        generation=draw(st.integers(0, 100)),
        lease_owner=draw(st.none() | st.just("host:1")),
        lease_until=draw(_MAYBE_TIME),
        finished_at=draw(_MAYBE_TIME),
        last_error=draw(st.none() | _TEXT),
        dead_reason=draw(st.none() | st.sampled_from(["timeout", "x"])),
        attempts=tuple(draw(st.lists(_ATTEMPT, max_size=2))),
        notified=draw(st.none() | st.sampled_from(['{"ok": true}', "{}"])),
    )


def _same(job: Job, with_attempts: bool) -> None:
    new, old = job_out(job, with_attempts), reference_job_out(job, with_attempts)
    assert new == old
    assert list(new) == list(old)
    assert fast.rendered(new) == fast.rendered(old)
    assert fast.rendered([new]) == fast.rendered([old])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs(), st.booleans())
def test_job_out_renders_as_the_reference(job: Job, with_attempts: bool) -> None:
    _same(job, with_attempts)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(jobs(), min_size=2, max_size=20))
def test_a_batch_renders_as_the_reference(batch: list[Job]) -> None:
    """Many jobs in one answer (the lru-cached times shared between them)."""
    new = [job_out(j) | {"created": True} for j in batch]
    old = [reference_job_out(j) | {"created": True} for j in batch]
    assert fast.rendered(new) == fast.rendered(old)
