"""SystemClock sleeps notice a step of the wall clock (drills/clock_jumps.py found they did not)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from jobctl.domain.clock import SystemClock

T0 = datetime(2027, 1, 10, 12, 0, tzinfo=UTC)


class SteppedClock(SystemClock):
    """The real sleeping of SystemClock on a wall clock the test steps."""

    nap = 0.01

    def __init__(self) -> None:
        self.wall = T0

    def now(self) -> datetime:
        return self.wall


async def test_a_step_forward_past_the_deadline_ends_the_sleep() -> None:
    clock = SteppedClock()
    sleeper = asyncio.create_task(clock.sleep_until(T0 + timedelta(hours=1), asyncio.Event()))
    await asyncio.sleep(0.05)
    assert not sleeper.done()  # an hour of wall time left: still asleep
    clock.wall = T0 + timedelta(hours=1, seconds=1)  # the host clock is stepped
    await asyncio.wait_for(sleeper, 2)  # before the fix: asleep for the whole hour


async def test_a_step_back_extends_the_sleep() -> None:
    clock = SteppedClock()
    clock.wall = T0 - timedelta(minutes=10)
    sleeper = asyncio.create_task(clock.sleep_until(T0, asyncio.Event()))
    await asyncio.sleep(0.05)
    assert not sleeper.done()
    clock.wall = T0  # the deadline's wall time comes, however late in real time
    await asyncio.wait_for(sleeper, 2)


async def test_wake_and_past_deadlines_return_at_once() -> None:
    clock = SteppedClock()
    await asyncio.wait_for(clock.sleep_until(T0 - timedelta(seconds=1), asyncio.Event()), 1)
    wake = asyncio.Event()
    sleeper = asyncio.create_task(clock.sleep_until(None, wake))
    await asyncio.sleep(0.02)
    assert not sleeper.done()
    wake.set()
    await asyncio.wait_for(sleeper, 1)


async def test_a_wake_up_reaches_the_sleeper_in_one_turn_of_the_loop() -> None:
    """Issue 17: the timer woken by freed slots claims before the work queued behind the
    wake-up in the same turn (the finishes of the exits that freed them), so its claim
    reaches the store first; ``wait_for``'s inner task took three turns."""
    for deadline in (None, T0 + timedelta(hours=1)):
        clock = SteppedClock()
        wake = asyncio.Event()
        sleeper = asyncio.create_task(clock.sleep_until(deadline, wake))
        await asyncio.sleep(0.02)
        assert not sleeper.done()
        wake.set()
        await asyncio.sleep(0)  # one turn: the sleeper's own step runs in it
        assert sleeper.done()
