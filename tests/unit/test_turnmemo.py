"""engine/turnmemo.py: an answer holds for the loop turn it was asked in, no longer."""

from __future__ import annotations

import asyncio
import os
import pwd
from dataclasses import replace

import pytest

from jobctl.domain.models import Claim
from jobctl.engine import process
from jobctl.engine.turnmemo import TurnMemo
from tests.unit.test_retry import job


class Counting:
    """A computation that says how often it ran (its answer: the key and the count)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, key: int) -> tuple[int, int]:
        self.calls += 1
        return key, self.calls


async def test_one_turn_asks_once_per_key() -> None:
    count = Counting()
    memo = TurnMemo(count)
    assert memo.get(1) == (1, 1)
    assert memo.get(1) == (1, 1)
    assert memo.get(2) == (2, 2)
    assert memo.get(2) == (2, 2) and count.calls == 2


async def test_the_next_turn_asks_again() -> None:
    count = Counting()
    memo = TurnMemo(count)
    assert memo.get(1) == (1, 1)
    await asyncio.sleep(0)  # one turn
    assert memo.get(1) == (1, 2)
    assert memo.get(1) == (1, 2)
    await asyncio.sleep(0)
    assert memo.get(1) == (1, 3) and count.calls == 3


async def test_a_key_first_asked_later_in_a_turn_is_not_kept_past_it() -> None:
    count = Counting()
    memo = TurnMemo(count)
    memo.get(1)
    memo.get(2)  # the turn's clear is scheduled already: it drops this one too
    await asyncio.sleep(0)
    assert memo.get(2) == (2, 3)


async def test_tasks_started_together_share_the_answer() -> None:
    count = Counting()
    memo = TurnMemo(count)

    async def start() -> tuple[int, int]:
        return memo.get(7)

    got = await asyncio.gather(*(start() for _ in range(5)))
    assert got == [(7, 1)] * 5 and count.calls == 1


def test_outside_a_loop_every_ask_computes() -> None:
    count = Counting()
    memo = TurnMemo(count)
    assert [memo.get(1) for _ in range(3)] == [(1, 1), (1, 2), (1, 3)]


def test_an_answer_of_a_loop_that_stopped_is_not_used_by_the_next() -> None:
    count = Counting()
    memo = TurnMemo(count)

    async def ask() -> tuple[int, int]:
        return memo.get(1)

    first = asyncio.new_event_loop()
    try:
        assert first.run_until_complete(ask()) == (1, 1)  # its clear never ran
    finally:
        first.close()
    assert asyncio.run(ask()) == (1, 2)


async def test_forget_drops_the_turns_answers() -> None:
    count = Counting()
    memo = TurnMemo(count)
    memo.get(1)
    memo.forget()
    assert memo.get(1) == (1, 2)


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root daemon drops to the owner")
async def test_each_start_gets_the_owners_groups_as_a_list_of_its_own() -> None:
    """command_line's groups come from the turn's memo (engine/commandline.py), each
    start's its own list: one start's cannot change another's."""
    spec = replace(job().spec, owner_uid=65534, cwd="/")
    claim = Claim(replace(job(), spec=spec), 1, 1, job().run_at)
    name, gid = pwd.getpwuid(65534).pw_name, pwd.getpwuid(65534).pw_gid
    *_, first = process.command_line(claim, "o", None, None, False)
    *_, second = process.command_line(claim, "o", None, None, False)
    assert first is not None and second is not None
    assert first == second == (65534, gid, os.getgrouplist(name, gid))
    first[2].append(12345)
    assert 12345 not in second[2]
