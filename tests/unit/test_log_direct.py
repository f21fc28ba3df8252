"""The ``event=enqueued`` lines written without a LogRecord (:func:`jobctl.logfmt.direct`):
byte for byte the lines ``Logger.log`` writes through the daemon's handler."""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from jobctl.domain.models import JobSpec
from jobctl.domain.records import AttemptResult, Claim, Job
from jobctl.domain.states import JobStatus, Outcome
from jobctl.engine import results
from jobctl.logfmt import BackgroundStreamHandler, JsonFormatter, LogfmtFormatter, direct
from jobctl.metrics import log_jobs

#: 2025-12-01 12:00:00 UTC, then a few milliseconds' worth of instants around edges.
T0 = 1_764_590_400.0
TIMES = [T0 + 0.0504, T0 + 0.0509, T0 + 0.051, T0 + 0.9999, T0 + 1.0, T0 + 1.0, T0 + 61.25]


@pytest.fixture
def utc_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The local zone is UTC (the lines' ``ts`` is local time)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _job(job_id: int, queue: str, key: str) -> Job:
    run_at = datetime(2099, 1, 1, 0, 0, 0, 250_000, tzinfo=UTC)
    spec = JobSpec(("true",), run_at, os.geteuid(), key=key, queue=queue)
    created = datetime(2025, 12, 1, tzinfo=UTC)
    return Job(
        job_id,
        key,
        spec,
        JobStatus.SCHEDULED,
        run_at,
        created,
        0,
        0,
        1,
        None,
        None,
        None,
        None,
        None,
    )


JOBS = [_job(7, "default", "k-7"), _job(8, "mail out", 'say "hi"=x')]


def _lines(monkeypatch: pytest.MonkeyPatch, fast: bool, times: list[float]) -> list[str]:
    """What :func:`log_jobs` writes for :data:`JOBS` at each of ``times``, through the
    daemon's handler set-up, the direct way or (a logger filter) through logging."""
    stream = io.StringIO()
    handler = BackgroundStreamHandler(stream)
    handler.setFormatter(LogfmtFormatter())
    logger = logging.getLogger(f"jobctl.api.test{fast}{id(handler)}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    if not fast:
        logger.addFilter(lambda _record: True)
    assert (direct(logger) is not None) is fast
    for t in times:
        monkeypatch.setattr(time, "time", lambda t=t: t)
        assert log_jobs(logger, "enqueued", JOBS, "0123456789abcdef")
    monkeypatch.undo()
    handler.close()
    return [line.replace(logger.name, "jobctl.api") for line in stream.getvalue().splitlines()]


@pytest.mark.usefixtures("utc_zone")
def test_the_enqueued_lines_are_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = [
        "ts=2025-12-01 12:00:00,050 level=INFO logger=jobctl.api event=enqueued job=7 "
        "queue=default run_at=2099-01-01T00:00:00.250Z key=k-7 request_id=0123456789abcdef",
        "ts=2025-12-01 12:00:00,050 level=INFO logger=jobctl.api event=enqueued job=8 "
        'queue="mail out" run_at=2099-01-01T00:00:00.250Z key="say \\"hi\\"=x" '
        "request_id=0123456789abcdef",
    ]
    for fast in (True, False):
        assert _lines(monkeypatch, fast, [T0 + 0.0504]) == expected


@pytest.mark.usefixtures("utc_zone")
def test_direct_lines_are_logging_s_lines_byte_for_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    direct_lines = _lines(monkeypatch, True, TIMES)
    assert direct_lines == _lines(monkeypatch, False, TIMES)
    assert len(direct_lines) == 2 * len(TIMES)
    assert [line[:26] for line in direct_lines[::2]] == [
        "ts=2025-12-01 12:00:00,050",
        "ts=2025-12-01 12:00:00,050",
        "ts=2025-12-01 12:00:00,051",
        "ts=2025-12-01 12:00:00,999",
        "ts=2025-12-01 12:00:01,000",
        "ts=2025-12-01 12:00:01,000",
        "ts=2025-12-01 12:01:01,250",
    ]


def test_any_other_set_up_logs_through_logging() -> None:
    """JSON lines, a second handler, a filter, a handler above INFO: no direct writer."""
    handler = BackgroundStreamHandler(io.StringIO())
    handler.setFormatter(LogfmtFormatter())
    logger = logging.getLogger(f"jobctl.api.other{id(handler)}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    assert direct(logger) is not None
    handler.setFormatter(JsonFormatter())
    assert direct(logger) is None
    handler.setFormatter(LogfmtFormatter())
    logger.propagate = True  # its parents' handlers too (pytest's capture, for one)
    logging.getLogger("jobctl.api").addHandler(extra := logging.NullHandler())
    try:
        assert direct(logger) is None
    finally:
        logging.getLogger("jobctl.api").removeHandler(extra)
        logger.propagate = False
    handler.setLevel(logging.WARNING)
    assert direct(logger) is None
    handler.setLevel(logging.NOTSET)
    handler.addFilter(lambda _record: True)
    assert direct(logger) is None
    handler.close()


def _executor_lines(monkeypatch: pytest.MonkeyPatch, fast: bool) -> list[str]:
    """The executor's start and end lines of one attempt of ``JOBS[1]`` (a retry, then a
    death), through the daemon's handler set-up, the direct way or through logging."""
    stream = io.StringIO()
    handler = BackgroundStreamHandler(stream)
    handler.setFormatter(LogfmtFormatter())
    logger = logging.getLogger("jobctl.executor")
    monkeypatch.setattr(logger, "handlers", [handler])
    monkeypatch.setattr(logger, "propagate", False)
    monkeypatch.setattr(logger, "filters", [] if fast else [lambda _record: True])
    level = logger.level
    logger.setLevel(logging.INFO)
    assert (direct(logger) is not None) is fast
    claim = Claim(JOBS[1], 3, 9, JOBS[1].run_at)
    failed = AttemptResult(Outcome.FAILED, 2, 'exit code 2 "x"')
    retry = dataclasses.replace(JOBS[1], status=JobStatus.SCHEDULED)
    dead = dataclasses.replace(JOBS[1], status=JobStatus.DEAD, dead_reason="max_attempts")
    monkeypatch.setattr(time, "time", lambda: T0 + 0.0504)
    results.log_started(claim, 4321)
    results.log_finished(retry, claim, failed)
    results.log_finished(dead, claim, failed)
    monkeypatch.undo()
    logger.setLevel(level)
    handler.close()
    return stream.getvalue().splitlines()


@pytest.mark.usefixtures("utc_zone")
def test_the_executors_lines_are_the_same_direct_or_through_logging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    head = "ts=2025-12-01 12:00:00,050 level=INFO logger=jobctl.executor "
    expected = [
        head + 'event=started job=8 attempt=3 gen=9 pid=4321 queue="mail out" key="say \\"hi\\"=x"',
        head + "event=retry_scheduled job=8 attempt=3 outcome=failed exit=2 status=scheduled "
        'error="exit code 2 \\"x\\"" run_at=2099-01-01T00:00:00.250Z',
        head + "event=dead job=8 attempt=3 outcome=failed exit=2 status=dead "
        'error="exit code 2 \\"x\\"" reason=max_attempts',
    ]
    assert _executor_lines(monkeypatch, True) == expected
    assert _executor_lines(monkeypatch, False) == expected
