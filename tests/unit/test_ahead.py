"""The ready queue of jobs claimed ahead of free slots (engine/ahead.py): its room."""

from __future__ import annotations

from datetime import UTC, datetime

from jobctl.domain.models import Claim, Job
from jobctl.engine.ahead import AHEAD_WAIT, ReadyQueue


def claim(job_id: int, generation: int = 1) -> Claim:
    job = object.__new__(Job)
    object.__setattr__(job, "id", job_id)
    return Claim(job, 1, generation, datetime(2030, 1, 1, tzinfo=UTC))


def test_no_room_before_a_slot_was_given_back_nor_when_switched_off() -> None:
    assert ReadyQueue(8, 16).room() == 0  # no hold measured yet
    off = ReadyQueue(0, 16)
    off.held(0.001)
    assert off.room() == 0 and off.hold is None


def test_the_room_is_what_should_start_within_the_wait() -> None:
    q = ReadyQueue(8, 16)
    q.held(0.01)  # 16 slots each freed every 10 ms: far more than 8 within the wait
    assert q.room() == 8
    q = ReadyQueue(8, 16)
    q.held(4 * AHEAD_WAIT)  # 16 slots every 0.4 s: 4 expected within 0.1 s
    assert q.room() == 4
    q = ReadyQueue(8, 16)
    q.held(60.0)
    assert q.room() == 0  # long commands: nothing waits behind them


def test_never_more_wait_than_there_are_slots() -> None:
    q = ReadyQueue(8, 1)
    q.held(0.001)  # one slot freed every ms: 100 expected within the wait
    assert q.room() == 1
    q.add(claim(1))
    assert q.room() == 0
    q = ReadyQueue(8, 3)
    q.held(0.0)
    assert q.room() == 3


def test_the_hold_is_a_running_mean_that_long_commands_move() -> None:
    q = ReadyQueue(8, 16)
    q.held(0.01)
    for _ in range(40):
        q.held(60.0)
    assert q.room() == 0
    assert q.hold is not None and q.hold > 30


def test_claims_leave_first_in_first_out_and_by_generation() -> None:
    q = ReadyQueue(8, 16)
    q.held(0.0)
    for i in (1, 2, 3):
        q.add(claim(i, generation=i))
    assert q.room() == 5 and len(q) == 3
    assert q.leases() == [(1, 1), (2, 2), (3, 3)]
    assert q.remove(2, generation=7) is None  # another attempt's: not this one
    removed = q.remove(2, generation=2)
    assert removed is not None and removed.job.id == 2
    first = q.pop()
    assert first is not None and first.job.id == 1
    assert [c.job.id for c in q.drain()] == [3]
    assert q.pop() is None and len(q) == 0
