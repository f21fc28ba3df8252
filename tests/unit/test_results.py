"""What an exit means (engine/results.py ``result_of``): the shared result of a silent
success is the one a success is built as, and nothing else gets it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from jobctl.domain.models import AttemptResult, Claim
from jobctl.domain.states import Outcome, StopReason
from jobctl.engine import process, results
from tests.unit.test_retry import job


@pytest.fixture
def run() -> Iterator[process.Running]:
    loop = asyncio.new_event_loop()
    j = job()
    exited, start = loop.create_future(), loop.create_future()
    yield process.Running(Claim(j, 1, 1, j.run_at), None, exited, "/x.log", start)  # type: ignore[arg-type]
    loop.close()


def test_a_silent_success_is_the_one_shared_result(run: process.Running) -> None:
    built = AttemptResult(Outcome.SUCCEEDED, 0, None, "", log_bytes=0)
    assert results.result_of(run, 0, "") == built
    assert results.result_of(run, 0, "", 0) is results.result_of(run, 0, "")  # no churn


@pytest.mark.parametrize(("tail", "size"), [("hi\n", 3), ("", 7), ("\0", 0)])
def test_a_success_that_wrote_something_has_its_own(
    run: process.Running, tail: str, size: int
) -> None:
    got = results.result_of(run, 0, tail, size)
    assert got == AttemptResult(Outcome.SUCCEEDED, 0, None, tail, log_bytes=size)
    assert got is not results.SILENT_SUCCESS


def test_a_stopped_command_is_never_a_silent_success(run: process.Running) -> None:
    run.stop_reason, run.stop_detail = StopReason.CANCEL, "cancelled by the user"
    got = results.result_of(run, 0, "")
    assert got.outcome is StopReason.CANCEL.outcome and got.error == "cancelled by the user"
    run.stop_reason = StopReason.SHUTDOWN
    assert results.result_of(run, 0, "").outcome is StopReason.SHUTDOWN.outcome
