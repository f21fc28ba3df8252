"""The owner is checked again right before a job starts (jobctl.access.run_refusal)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from jobctl.access import Access
from jobctl.domain.states import JobStatus, Outcome
from tests.engine.conftest import Engine

GONE = 123_456_789  # a uid without an account


async def test_a_job_of_a_removed_owner_is_dead_and_never_started(
    engine: Engine, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    job = engine.add(f"touch {marker}", owner_uid=GONE, max_attempts=5)
    [result] = await engine.finishes(1)
    assert result.outcome is Outcome.FAILED and result.dead_reason == "denied"
    stored = engine.store.get(job.id)
    assert stored.status is JobStatus.DEAD and stored.dead_reason == "denied"
    assert stored.failures == 1  # dead at once, four attempts of budget left unused
    [attempt] = stored.attempts
    assert attempt.pid is None and "no longer exists" in (attempt.error or "")
    assert not marker.exists()


async def test_an_owner_denied_since_enqueue_is_not_run(engine: Engine, tmp_path: Path) -> None:
    other = next((p for p in pwd.getpwall() if p.pw_uid not in (0, os.geteuid())), None)
    if other is None:
        pytest.skip("no second account on this system")
    deny = tmp_path / "jobctl.deny"
    engine.executor.access = Access(tmp_path / "jobctl.allow", deny)
    deny.write_text(f"{other.pw_name}\n")
    marker = tmp_path / "ran"
    job = engine.add(f"touch {marker}", owner_uid=other.pw_uid)
    [result] = await engine.finishes(1)
    assert result.dead_reason == "denied" and f"listed in {deny}" in (result.error or "")
    assert engine.store.get(job.id).dead_reason == "denied" and not marker.exists()


async def test_the_daemons_own_jobs_always_run(engine: Engine, tmp_path: Path) -> None:
    allow = tmp_path / "jobctl.allow"
    allow.write_text("")  # nobody listed: the daemon's user and root run all the same
    engine.executor.access = Access(allow, tmp_path / "jobctl.deny")
    engine.add("true")
    [result] = await engine.finishes(1)
    assert result.outcome is Outcome.SUCCEEDED
