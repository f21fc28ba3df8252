"""Repeating errors are logged once, then at most once per interval with a count."""

from __future__ import annotations

import logging
from datetime import datetime

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.engine.service import Service
from jobctl.lograte import MAX_KEYS, RateLimitedLog


def lines(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_first_then_one_line_per_interval_with_the_suppressed_count(
    caplog: pytest.LogCaptureFixture, clock: FakeClock
) -> None:
    caplog.set_level(logging.INFO, logger="t")
    rl = RateLimitedLog(logging.getLogger("t"), clock, interval=60)
    for _ in range(30):  # an error loop: once a second for 30 s
        rl.error("disk", "event=x_failed error=%s", "disk")
        clock.advance(1)
    assert lines(caplog, "t") == ["event=x_failed error=disk"]
    clock.advance(30)  # 60 s after the first line
    assert rl.error("disk", "event=x_failed error=%s", "disk")
    assert not rl.error("disk", "event=x_failed error=%s", "disk")
    assert lines(caplog, "t")[1:] == ["event=x_failed error=disk suppressed=29"]
    assert rl.recovered("event=x_recovered") == 32
    assert lines(caplog, "t")[2:] == ["event=x_recovered failures=32"]
    assert rl.recovered("event=x_recovered") == 0  # nothing failed since: no line
    assert len(lines(caplog, "t")) == 3


def test_distinct_errors_are_each_logged(
    caplog: pytest.LogCaptureFixture, clock: FakeClock
) -> None:
    caplog.set_level(logging.INFO, logger="t")
    rl = RateLimitedLog(logging.getLogger("t"), clock)
    for key in ("a", "b", "a", "b"):
        rl.error(key, "event=failed error=%s", key)
    assert lines(caplog, "t") == ["event=failed error=a", "event=failed error=b"]
    for n in range(MAX_KEYS + 10):  # memory stays bounded
        rl.error(str(n), "event=failed error=%s", n)
    assert len(rl._seen) <= MAX_KEYS


class Failing(Service):
    """Fails ``failures`` passes, then succeeds once and stops."""

    name = "flaky"
    retry_delay = 0.0

    def __init__(self, clock: FakeClock, failures: int) -> None:
        super().__init__(clock)
        self.left = failures

    async def run_once(self) -> datetime | None:
        if self.left:
            self.left -= 1
            self._clock.advance(1)  # type: ignore[attr-defined]
            raise OSError(28, "No space left on device")
        self.stop()
        return None


async def test_a_service_error_loop_logs_once_a_minute(
    caplog: pytest.LogCaptureFixture, clock: FakeClock
) -> None:
    caplog.set_level(logging.INFO, logger="jobctl.flaky")
    await Failing(clock, 150).run()  # 150 failures a second apart, then a good pass
    assert lines(caplog, "jobctl.flaky") == [
        'event=flaky_failed error="[Errno 28] No space left on device"',
        'event=flaky_failed error="[Errno 28] No space left on device" suppressed=59',
        'event=flaky_failed error="[Errno 28] No space left on device" suppressed=59',
        "event=flaky_recovered failures=150",
    ]
