"""The lease watch (engine/leasewatch.py) on the fake clock: a lease not renewed is given
up at the margin before its end, a renewal moves that, and a heartbeat that never
returns does not hold the watch back (it runs on its own timer)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from jobctl.domain.clock import FakeClock
from jobctl.engine.leasewatch import LeaseWatch, give_up_margin


def test_the_margin_leaves_room_for_the_stop_and_for_one_heartbeat() -> None:
    assert give_up_margin(30, 10) == 13  # kill_grace + ttl/10
    assert give_up_margin(3, 1) == 1.3
    assert give_up_margin(3, 10) == 2  # at most 2/3 of the ttl: a heartbeat is tried first


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_leases_not_renewed_are_given_up_at_the_margin_before_their_end() -> None:
    async def main() -> None:
        clock = FakeClock()
        given: list[list[int]] = []
        watch = LeaseWatch(clock, lease_ttl=3, kill_grace=1, give_up=given.append)
        start = clock.now()
        watch.claimed(1, start + timedelta(seconds=3))
        watch.claimed(2, start + timedelta(seconds=3))
        clock.advance(1)
        watch.renewed([2], clock.now())  # 2 now surely held until 4 s
        await _settle()
        clock.advance(0.6)  # 1.6 s: before 3 - 1.3
        await _settle()
        assert given == []
        clock.advance(0.1)  # 1.7 s: 1's give-up time
        await _settle()
        assert given == [[1]]
        clock.advance(1.0)  # 2.7 s = 4 - 1.3: 2's
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
        watch = LeaseWatch(clock, lease_ttl=3, kill_grace=1, give_up=given.append)
        watch.claimed(7, clock.now() + timedelta(seconds=3))
        watch.done(7)
        clock.advance(5)
        await _settle()
        assert given == []
        await watch.close()

    asyncio.run(main())
