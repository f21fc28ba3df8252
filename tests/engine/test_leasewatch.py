"""The lease watch (engine/leasewatch.py) on the fake clock: a lease not renewed is given
up at the margin before its end, a renewal moves that, and a heartbeat that never
returns does not hold the watch back (it runs on its own timer)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.engine.leasewatch import LeaseWatch, stop_grace


def test_the_stop_of_a_given_up_command_ends_before_its_lease() -> None:
    """Given up with a third of the TTL left, SIGKILL a tenth of it before the end."""
    assert stop_grace(30, 10) == pytest.approx(7)
    assert stop_grace(30, 2) == 2
    assert stop_grace(3, 10) == pytest.approx(0.7)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_leases_not_renewed_are_given_up_at_the_margin_before_their_end() -> None:
    async def main() -> None:
        clock = FakeClock()
        given: list[list[int]] = []
        watch = LeaseWatch(clock, lease_ttl=3, give_up=given.append)
        start = clock.now()
        watch.claimed(1, start + timedelta(seconds=3))
        watch.claimed(2, start + timedelta(seconds=3))
        clock.advance(1)
        watch.renewed([2], clock.now())  # 2 now surely held until 4 s
        await _settle()
        clock.advance(0.9)  # 1.9 s: before 3 - 1
        await _settle()
        assert given == []
        clock.advance(0.1)  # 2 s: 1's give-up time
        await _settle()
        assert given == [[1]]
        clock.advance(1.0)  # 3 s = 4 - 1: 2's
        await _settle()
        assert given == [[1], [2]]
        watch.renewed([1, 2], clock.now())  # given up stays given up
        clock.advance(10)
        await _settle()
        assert given == [[1], [2]]
        await watch.close()

    asyncio.run(main())


def test_a_finished_attempt_is_not_given_up() -> None:
    async def main() -> None:
        clock = FakeClock()
        given: list[list[int]] = []
        watch = LeaseWatch(clock, lease_ttl=3, give_up=given.append)
        watch.claimed(7, clock.now() + timedelta(seconds=3))
        watch.done(7)
        clock.advance(5)
        await _settle()
        assert given == []
        await watch.close()

    asyncio.run(main())
