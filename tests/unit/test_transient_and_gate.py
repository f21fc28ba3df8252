"""Pure parts of the hardening: a start that failed for want of a resource is retried
for free with backoff; the connection gate's counting; the trampoline's argv."""

from __future__ import annotations

import errno
import random
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from jobctl.api.server import ConnectionLimits, Gate
from jobctl.domain.models import Backoff
from jobctl.domain.retry import TRANSIENT_MIN_DELAY, next_step
from jobctl.domain.states import JobStatus, Outcome
from jobctl.engine import process
from jobctl.engine.results import not_started as _not_started
from tests.unit.test_retry import job

NOW = datetime(2027, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "code", [errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM, errno.ENOSPC, errno.EDQUOT]
)
def test_resource_exhaustion_at_start_is_transient(code: int) -> None:
    result = _not_started(OSError(code, "out of it"))
    assert result.transient and result.outcome is Outcome.FAILED and result.exit_code is None
    assert "retried later" in (result.error or "")


@pytest.mark.parametrize(
    ("exc", "code"),
    [(FileNotFoundError(2, "no such file"), 127), (PermissionError(13, "denied"), 126)],
)
def test_a_broken_command_is_not(exc: OSError, code: int) -> None:
    result = _not_started(exc)
    assert not result.transient and result.exit_code == code


def test_a_transient_failure_uses_no_budget_and_never_kills_the_job() -> None:
    rng = random.Random(1)
    last = job(failures=0, max_attempts=1, backoff=Backoff(0, 0))  # no budget left to use
    for attempt in range(1, 50):
        last = replace(last, attempt=attempt)
        step = next_step(last, Outcome.FAILED, None, NOW, rng, transient=True)
        assert step.status is JobStatus.SCHEDULED and step.failures == 0
        assert step.dead_reason is None and step.run_at is not None
        wait = (step.run_at - NOW).total_seconds()
        assert TRANSIENT_MIN_DELAY / 2 <= wait <= TRANSIENT_MIN_DELAY  # base 0: the floor


def test_transient_waits_grow_with_the_jobs_backoff() -> None:
    rng = random.Random(2)
    j = job(failures=1, backoff=Backoff(10, 100))
    waits = []
    for attempt in (2, 3, 4, 5, 9):  # free attempts so far: attempt - failures
        step = next_step(
            replace(j, attempt=attempt), Outcome.FAILED, None, NOW, rng, transient=True
        )
        assert step.run_at is not None
        waits.append((step.run_at - NOW).total_seconds())
    ceilings = [10, 20, 40, 80, 100]
    assert all(c / 2 <= w <= c for w, c in zip(waits, ceilings, strict=True)), waits


def test_an_ordinary_failure_still_uses_the_budget() -> None:
    step = next_step(job(failures=0, max_attempts=1), Outcome.FAILED, 1, NOW, random.Random(3))
    assert step.status is JobStatus.DEAD and step.failures == 1


def test_the_gate_counts_per_uid_and_in_total_and_spares_root() -> None:
    gate = Gate(ConnectionLimits(total=4, per_uid=2), nofile=1024)
    assert gate.admit(1000) is None and gate.admit(1000) is None
    refused = gate.admit(1000)
    assert refused is not None and "uid 1000" in refused and "limit per uid" in refused
    assert gate.admit(1001) is None and gate.admit(1001) is None
    refused = gate.admit(1002)
    assert refused is not None and "limit in total" in refused
    assert gate.admit(0) is None  # root is held to its per-uid bound only
    gate.release(1000)  # root's connection counts in the total all the same
    assert gate.admit(1002) is not None
    gate.release(1001)
    assert gate.admit(1002) is None
    assert gate.total == 4 and gate.by_uid == {1000: 1, 1001: 1, 0: 1, 1002: 1}


def test_the_total_stays_under_half_the_open_file_limit() -> None:
    assert Gate(ConnectionLimits(total=512), nofile=256).total_cap == 128
    assert Gate(ConnectionLimits(total=512), nofile=1 << 20).total_cap == 512


def test_the_trampoline_carries_the_jobs_own_pwd_and_oldpwd() -> None:
    argv = process.trampoline("/srv/x", {"OLDPWD": "/o"}, 1024)
    assert argv[:3] == ["/bin/sh", "-c", process.TRAMPOLINE]
    assert argv[3:] == ["jobctl", "1024", "/srv/x", "=/o", "", "", ""]  # $5: no cap, $6: no gate
    assert process.trampoline("/", {}, None)[4] == ""
    assert process.trampoline("/", {}, None, 2048)[-2] == "2048"  # the cap, in blocks
    assert process.trampoline("/", {}, None, None, gate=True)[-1] == "gate"


def test_admins_pass_the_total_but_not_their_per_uid_bound() -> None:
    gate = Gate(ConnectionLimits(total=1, per_uid=2), nofile=1024, is_admin=lambda uid: uid == 5)
    assert gate.admit(1000) is None and gate.admit(1001) is not None
    assert gate.admit(5) is None and gate.admit(5) is None
    assert gate.admit(5) is not None  # its own per-uid bound still holds
