"""Issue 11 item 7: a job that cannot be started ends with a clear reason; it never stays
``running`` holding a slot (a NUL in an argument made Popen raise ValueError, which the
executor did not catch)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from jobctl.domain.models import JobSpec, trusted_spec
from jobctl.domain.states import JobStatus
from tests.engine.conftest import Engine


def _unchecked(engine: Engine, **changes: Any) -> JobSpec:
    """A spec as an older version could store it, past today's checks."""
    ok = JobSpec(("true",), engine.clock.now(), os.geteuid(), cwd=str(engine.tmp))
    return trusted_spec(**{f: getattr(ok, f) for f in JobSpec.__dataclass_fields__} | changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"command": ("/bin/echo", "a\0b")},
        {"env": (("NAME", "x\0y"),)},
        {"cwd": "/tmp\0x"},
    ],
)
async def test_a_job_that_cannot_start_is_dead_with_the_reason(
    engine: Engine, changes: dict[str, Any]
) -> None:
    [ins] = engine.store.insert([_unchecked(engine, max_attempts=5, **changes)])
    [good] = engine.store.insert([_unchecked(engine)])
    engine.timer.wake()
    results = await engine.finishes(2)
    codes = [r.exit_code for r in results]
    assert sorted(codes, key=lambda c: -1 if c is None else c) == [0, 126]
    dead = engine.store.get(ins.job.id)
    assert dead.status is JobStatus.DEAD and dead.dead_reason == "non_retryable"
    assert dead.last_error is not None and "cannot start" in dead.last_error
    assert "null byte" in dead.last_error  # what Python says, passed on as it is
    assert len(dead.attempts) == 1  # no retries of what cannot work
    assert engine.store.get(good.job.id).status is JobStatus.SUCCEEDED
