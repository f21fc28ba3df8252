"""Batched executor writes: many finishes and pid records, one writer op each time the
writer is free, each caller answered on its own and only after the commit."""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, Backoff, JobSpec, ProcessRecord, trusted_spec
from jobctl.domain.states import JobStatus, Outcome
from jobctl.errors import InvalidInput, KeyConflict, LeaseLost
from jobctl.store import aio
from jobctl.store.aio import AsyncStore, Batcher
from jobctl.store.sqlite import SqliteStore
from tests.engine.conftest import Engine

OK = AttemptResult(Outcome.SUCCEEDED, 0)


@pytest.fixture
async def astore(tmp_path: Path, clock: FakeClock) -> AsyncIterator[AsyncStore]:
    store = SqliteStore(tmp_path / "batch.db", clock, random.Random(1))
    a = AsyncStore(store, threads=4)
    yield a
    a.close()
    store.close()


def _insert(astore: AsyncStore, clock: FakeClock, n: int) -> None:
    spec = JobSpec(("true",), clock.now(), os.geteuid(), max_attempts=3, backoff=Backoff(0, 0))
    astore.store.insert([spec] * n)


async def test_concurrent_finishes_share_one_op_and_answer_each(
    astore: AsyncStore, clock: FakeClock
) -> None:
    _insert(astore, clock, 6)
    claims = astore.store.claim_due("me", 6, 30)
    stale = claims[0]
    clock.advance(31)
    astore.store.reclaim_expired(10)  # every lease ran out: all generations move on ...
    fresh = {c.job.id: c for c in astore.store.claim_due("me", 6, 30)}
    calls = [astore.finish(c.job.id, c.generation, OK) for c in fresh.values()]
    calls.append(astore.finish(stale.job.id, stale.generation, OK))  # ... this one is stale
    out = await asyncio.gather(*calls, return_exceptions=True)
    assert astore.finishes.batches == 1
    assert [type(r).__name__ for r in out] == ["Finished"] * 6 + ["LeaseLost"]
    for c in fresh.values():
        assert astore.store.get(c.job.id).status is JobStatus.SUCCEEDED


async def test_records_are_batched_and_report_lost_leases(
    astore: AsyncStore, clock: FakeClock
) -> None:
    _insert(astore, clock, 3)
    a, b, c = astore.store.claim_due("me", 3, 30)
    await astore.finish(c.job.id, c.generation, OK)
    out = await asyncio.gather(
        *(
            astore.record_process(ProcessRecord(x.job.id, x.generation, 7, 1, "/l"))
            for x in (a, b, c)
        )
    )
    assert out == [True, True, False]
    assert astore.records.batches == 1


def _job(clock: FakeClock, cmd: str, key: str | None = None) -> JobSpec:
    return JobSpec((cmd,), clock.now(), os.geteuid(), key=key)


async def test_concurrent_enqueues_share_one_insert_and_answer_each(
    astore: AsyncStore, clock: FakeClock
) -> None:
    calls = [
        astore.insert([_job(clock, "a"), _job(clock, "b")]),
        astore.insert([_job(clock, "c", key="k1")]),
        astore.insert([_job(clock, "c", key="k1")]),  # same key, same body: the same job
        astore.insert([_job(clock, "d", key="k2"), _job(clock, "d", key="k2")]),
    ]
    a, k1, k1_again, k2 = await asyncio.gather(*calls)
    assert astore.inserts.batches == 1
    assert [i.job.spec.command for i in a] == [("a",), ("b",)] and all(i.created for i in a)
    assert k1[0].created and not k1_again[0].created and k1_again[0].job == k1[0].job
    assert [i.created for i in k2] == [True, False] and k2[0].job.id == k2[1].job.id
    ids = [i.job.id for r in (a, k1, k2) for i in r]
    assert ids == sorted(ids) and len(set(ids)) == 4  # ids in request order
    for i in (*a, *k1, *k2):
        assert astore.store.get(i.job.id) == i.job


async def test_a_refused_enqueue_fails_alone_in_its_batch(
    astore: AsyncStore, clock: FakeClock
) -> None:
    astore.store.insert([_job(clock, "old", key="taken")])
    calls = [
        astore.insert([_job(clock, "x")]),
        astore.insert([_job(clock, "y"), _job(clock, "new", key="taken")]),  # key conflict
        astore.insert([_job(clock, "z", key="fresh")]),
    ]
    x, refused, z = await asyncio.gather(*calls, return_exceptions=True)
    assert astore.inserts.batches == 1
    assert isinstance(refused, KeyConflict)
    assert not isinstance(x, BaseException) and not isinstance(z, BaseException)
    assert x[0].created and z[0].created and z[0].job.id == x[0].job.id + 1
    commands = {j.spec.command for j in astore.store.list_jobs(None, None, 10, None)}
    assert commands == {("old",), ("x",), ("z",)}  # nothing of the refused request stayed


def _poison(clock: FakeClock) -> JobSpec:
    """A job the store's CHECK constraint refuses (timeout_ms > 0), built past every
    check, as if validation had missed it: issue 11's ``timeout=1e-9``."""
    ok = _job(clock, "poison")
    return trusted_spec(
        **{f: getattr(ok, f) for f in JobSpec.__dataclass_fields__} | {"timeout": 1e-9}
    )


async def test_a_job_the_store_refuses_fails_alone_among_concurrent_enqueues(
    astore: AsyncStore, clock: FakeClock
) -> None:
    calls = [astore.insert([_job(clock, f"ok{i}")]) for i in range(20)]
    calls.insert(7, astore.insert([_job(clock, "mate"), _poison(clock)]))
    out = await asyncio.gather(*calls, return_exceptions=True)
    assert astore.inserts.batches == 1  # all of them shared one writer op
    refused = out.pop(7)
    assert isinstance(refused, InvalidInput) and "refused" in refused.message
    assert not any(isinstance(r, BaseException) for r in out)
    stored = {j.spec.command for j in astore.store.list_jobs(None, None, 100, None)}
    assert stored == {(f"ok{i}",) for i in range(20)}  # all valid ones, none of the refused


async def test_a_failing_op_fails_its_whole_batch_and_the_next_one_runs() -> None:
    calls: list[list[int]] = []

    async def op(items: list[int]) -> list[int]:
        calls.append(items)
        if len(calls) == 1:
            raise OSError("disk full")
        return [i * 10 for i in items]

    batcher: Batcher[int, int] = Batcher(op)
    first = await asyncio.gather(*(batcher.submit(i) for i in (1, 2)), return_exceptions=True)
    assert all(isinstance(r, OSError) for r in first)
    assert await asyncio.gather(*(batcher.submit(i) for i in (3, 4, 5))) == [30, 40, 50]
    assert calls == [[1, 2], [3, 4, 5]]


async def test_items_submitted_while_a_batch_commits_form_the_next_one() -> None:
    gate = asyncio.Event()
    calls: list[list[int]] = []

    async def op(items: list[int]) -> list[int]:
        calls.append(items)
        await gate.wait()
        return items

    batcher: Batcher[int, int] = Batcher(op, limit=3)
    futs = [batcher.submit(1)]
    await asyncio.sleep(0)  # the first batch is in flight
    futs += [batcher.submit(i) for i in range(2, 7)]
    gate.set()
    assert await asyncio.gather(*futs) == [1, 2, 3, 4, 5, 6]
    assert calls == [[1], [2, 3, 4], [5, 6]]


async def _closed_loop(batcher: Batcher[int, int], clients: int, rounds: int) -> None:
    """Clients that send again only after their answer, each after its own think time."""

    async def client(n: int) -> None:
        for _ in range(rounds):
            assert await batcher.submit(n) == n
            for _ in range(n):  # client n takes n turns of the loop to send again
                await asyncio.sleep(0)

    await asyncio.gather(*(client(n) for n in range(clients)))


async def test_a_lingering_batcher_keeps_returning_callers_in_one_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(aio, "LINGER_MIN", 60.0)  # callers coming back, not a clock, decide
    sizes: dict[bool, list[int]] = {}
    for linger in (False, True):
        seen = sizes[linger] = []

        async def op(items: list[int], seen: list[int] = seen) -> list[int]:
            seen.append(len(items))
            await asyncio.sleep(0)  # the commit
            return items

        await _closed_loop(Batcher(op, linger=linger), clients=6, rounds=5)
    assert sizes[True] == [6] * 5  # every commit carries every client
    assert max(sizes[False][1:]) < 6  # without it they split up (what linger is for)


async def test_a_lone_caller_is_not_kept_waiting() -> None:
    async def op(items: list[int]) -> list[int]:
        return items

    batcher: Batcher[int, int] = Batcher(op, linger=True)
    assert await batcher.submit(1) == 1
    await asyncio.sleep(0)
    assert not batcher.busy  # a batch of one: nothing to wait for


async def test_lingering_ends_when_callers_do_not_come_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(aio, "LINGER_MIN", 0.0)
    monkeypatch.setattr(aio, "LINGER_MAX", 0.0)  # the bound is reached at the next turn

    async def op(items: list[int]) -> list[int]:
        return items

    batcher: Batcher[int, int] = Batcher(op, linger=True)
    assert await asyncio.gather(*(batcher.submit(i) for i in range(3))) == [0, 1, 2]
    assert batcher.busy  # lingering: waits for the three to come back
    for _ in range(4):
        await asyncio.sleep(0)
    assert not batcher.busy


async def test_lingering_ends_as_soon_as_the_callers_are_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not at the bound: the returning callers' submits end the wait (it never spins the
    loop, whose turns a busy host's clients need)."""
    monkeypatch.setattr(aio, "LINGER_MIN", 60.0)
    calls: list[list[int]] = []

    async def op(items: list[int]) -> list[int]:
        calls.append(items)
        return items

    batcher: Batcher[int, int] = Batcher(op, linger=True)
    assert await asyncio.gather(*(batcher.submit(i) for i in range(3))) == [0, 1, 2]
    again = asyncio.gather(*(batcher.submit(i) for i in range(3, 6)))
    assert await asyncio.wait_for(again, timeout=5) == [3, 4, 5]
    assert calls == [[0, 1, 2], [3, 4, 5]]


async def test_the_linger_lasts_as_long_as_the_last_op_within_bounds() -> None:
    """A caller that missed a batch waits for a whole op and then its own: waiting up to
    one op's time for it saves a commit. A slow commit (a loaded database host) lets the
    batch wait longer for its callers; a fast one keeps the wait short."""
    now = [0.0]
    took = [0.002]

    async def op(items: list[int]) -> list[int]:
        now[0] += took[0]
        return items

    batcher: Batcher[int, int] = Batcher(op, linger=True, clock=lambda: now[0])
    await batcher.submit(1)
    assert batcher.linger_bound() == pytest.approx(0.002)
    took[0] = 10.0
    await batcher.submit(2)
    assert batcher.linger_bound() == aio.LINGER_MAX
    took[0] = 0.0
    await batcher.submit(3)
    assert batcher.linger_bound() == aio.LINGER_MIN


async def test_a_fenced_finish_is_reported_and_the_neighbours_succeed(engine: Engine) -> None:
    jobs = [engine.add("true") for _ in range(3)]
    await engine.finishes(3)
    for job in jobs:
        assert engine.store.get(job.id).status is JobStatus.SUCCEEDED
    with pytest.raises(LeaseLost):
        await engine.astore.finish(jobs[0].id, 1, OK)


async def test_a_fast_command_still_has_its_process_recorded(engine: Engine) -> None:
    jobs = [engine.add("true") for _ in range(4)]
    await engine.finishes(4)
    with closing(sqlite3.connect(f"file:{engine.store.path}?mode=ro", uri=True)) as conn:
        for job in jobs:
            pid, start, outcome = conn.execute(
                "SELECT pid, pid_start, outcome FROM attempts WHERE job_id = ?", (job.id,)
            ).fetchone()
            assert pid is not None and start is not None and outcome == "succeeded"
