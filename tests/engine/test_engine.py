"""Timer + executor + store with real processes and a fake clock."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from jobctl.domain.models import Backoff
from jobctl.domain.states import JobStatus, Outcome, StopReason
from tests.engine.conftest import Engine, later

pytestmark = pytest.mark.asyncio


async def test_due_job_runs_with_its_environment_and_output(engine: Engine) -> None:
    job = engine.add(
        'echo "id=$JOBCTL_JOB_ID key=$JOBCTL_JOB_KEY att=$JOBCTL_ATTEMPT '
        'gen=$JOBCTL_GENERATION x=$X"; pwd; test -z "$PYTEST_CURRENT_TEST"',
        key="report-1",
        env=(("X", "42"),),
    )
    [result] = await engine.finishes(1)
    assert result.outcome is Outcome.SUCCEEDED
    done = engine.store.get(job.id)
    assert done.status is JobStatus.SUCCEEDED
    tail = done.attempts[0].output_tail
    assert f"id={job.id} key=report-1 att=1 gen=1 x=42" in tail
    assert str(engine.tmp) in tail
    log_path = done.attempts[0].log_path
    assert log_path and Path(log_path).read_text() == tail


async def test_timer_sleeps_until_the_next_run_at(engine: Engine) -> None:
    due = later(engine.clock, 3600)
    job = engine.add("true", run_at=due)
    assert await engine.timer.run_once() == due
    assert engine.store.get(job.id).status is JobStatus.SCHEDULED
    engine.clock.set(due)
    await engine.finishes(1)
    assert engine.store.get(job.id).status is JobStatus.SUCCEEDED


async def test_failures_retry_with_backoff_then_die(engine: Engine) -> None:
    job = engine.add("echo nope; exit 3", max_attempts=3, backoff=Backoff(60, 60))
    for n in range(1, 4):
        results = await engine.finishes(n)
        assert results[-1].outcome is Outcome.FAILED and results[-1].exit_code == 3
        current = engine.store.get(job.id)
        if n < 3:
            assert current.status is JobStatus.SCHEDULED
            assert engine.clock.now() <= current.run_at <= later(engine.clock, 60)
            engine.clock.set(current.run_at)
    dead = engine.store.get(job.id)
    assert (dead.status, dead.dead_reason, dead.last_error) == (
        JobStatus.DEAD,
        "max_attempts",
        "exit code 3",
    )
    assert [a.number for a in dead.attempts] == [1, 2, 3]
    assert "nope" in dead.attempts[-1].output_tail


async def test_missing_command_is_dead_at_once(engine: Engine) -> None:
    job = engine.add(["/nonexistent/cmd"], max_attempts=5)
    [result] = await engine.finishes(1)
    assert result.exit_code == 127
    assert engine.store.get(job.id).dead_reason == "non_retryable"


async def test_timeout_terms_then_kills_the_group(engine: Engine) -> None:
    job = engine.add("trap '' TERM; sleep 30 & wait", timeout=0.2, max_attempts=1)
    [result] = await engine.finishes(1)
    assert result.outcome is Outcome.TIMEOUT
    assert result.error == "timed out after 0.2s"
    dead = engine.store.get(job.id)
    assert (dead.status, dead.dead_reason) == (JobStatus.DEAD, "timeout")
    pid = dead.attempts[0].pid
    assert pid is not None and _group_gone(pid)


async def test_cancel_running_job_stops_its_process_group(engine: Engine) -> None:
    job = engine.add("sleep 30 & sleep 30; wait")
    await engine.started(job.id)
    res = engine.store.cancel(job.id, "cancelled by user")
    assert res.was_running
    assert engine.executor.stop(job.id, StopReason.CANCEL)
    await engine.finishes(1)
    got = engine.store.get(job.id)
    assert got.status is JobStatus.CANCELLED
    assert got.attempts[0].outcome is Outcome.CANCELLED
    assert _group_gone(got.attempts[0].pid or 0)
    assert engine.finished[0][0] is None  # the executor's late result was fenced


async def test_lost_lease_is_fenced_and_the_process_stopped(engine: Engine) -> None:
    job = engine.add("sleep 30", max_attempts=3)
    await engine.started(job.id)
    gen = engine.store.get(job.id).generation
    # another daemon reclaimed it (e.g. after a partition): the generation moved on
    engine.store.reclaim(job.id, gen, "reclaimed elsewhere")
    await engine.executor.heartbeat_once()
    await engine.finishes(1)
    assert engine.finished[0][0] is None
    got = engine.store.get(job.id)
    assert got.attempts[0].outcome is Outcome.LEASE_EXPIRED
    assert got.attempts[0].error == "reclaimed elsewhere"


async def test_a_lease_found_lost_for_an_ended_attempt_never_stops_the_next_one(
    engine: Engine,
) -> None:
    """A heartbeat sent while attempt 1 was live may be answered after attempt 2 started
    (issue 17: 9 ms apart after a database cut): that loss is attempt 1's, keyed by its
    generation; it neither stops attempt 2 nor counts against it."""
    job = engine.add("sleep 30", max_attempts=3)
    await engine.started(job.id)
    gen = engine.store.get(job.id).generation
    run = engine.executor._live[job.id]
    engine.executor._lease_lost_hb(job.id, gen - 1)  # what the heartbeat calls
    assert not engine.executor.stop(job.id, StopReason.LEASE_LOST, generation=gen - 1)
    assert run.stopping is None and run.stop_reason is None
    assert job.id not in engine.executor._reporter.lost
    assert engine.executor.stop(job.id, StopReason.CANCEL, "done with test", generation=gen)
    [result] = await engine.finishes(1)
    assert result.outcome is Outcome.CANCELLED


async def test_heartbeat_keeps_a_long_job_leased(engine: Engine) -> None:
    job = engine.add("sleep 30")
    await engine.started(job.id)
    for _ in range(4):  # 80 fake seconds, far past the 30 s lease
        engine.clock.advance(20)
        await engine.executor.heartbeat_once()
    assert engine.store.reclaim_expired(10) == []
    got = engine.store.get(job.id)
    assert got.status is JobStatus.RUNNING and got.lease_until == later(engine.clock, 30)
    engine.executor.stop(job.id, StopReason.CANCEL, "done with test")
    await engine.finishes(1)


async def test_concurrency_limit_is_respected(engine: Engine) -> None:
    marker = engine.tmp / "running"
    marker.mkdir()
    script = (
        f"touch {marker}/$JOBCTL_JOB_ID; ls {marker} | wc -l >> {engine.tmp}/counts; "
        f"sleep 0.05; rm {marker}/$JOBCTL_JOB_ID"
    )
    for _ in range(10):
        engine.add(script)
    results = await engine.finishes(10)
    assert all(r.outcome is Outcome.SUCCEEDED for r in results)
    counts = [int(x) for x in (engine.tmp / "counts").read_text().split()]
    assert max(counts) <= engine.executor.config.concurrency


async def test_an_ended_command_gives_its_slot_back_while_its_result_commits(
    engine: Engine,
) -> None:
    """A quick command's slot is free once it ended, not once its finish committed (the
    commit is most of its time); at most ``concurrency`` results wait so, then slots are
    held again. The store still counts them running until their finish lands."""
    hold = asyncio.Event()
    commit = engine.astore.finishes._op

    async def held(items: Any) -> Any:
        await hold.wait()
        return await commit(items)

    engine.astore.finishes._op = held
    ran = engine.tmp / "ran"
    slots = engine.executor.config.concurrency
    ids = [engine.add(f"echo $JOBCTL_JOB_ID >> {ran}").id for _ in range(2 * slots + 1)]
    async with asyncio.timeout(20):
        while not ran.exists() or len(ran.read_text().split()) < 2 * slots:
            await asyncio.sleep(0.01)  # other processes write the file: nothing to wait on
        while engine.executor.running_count < 2 * slots:
            await asyncio.sleep(0.01)
    assert engine.executor.free_slots == 0 and len(ran.read_text().split()) == 2 * slots
    statuses = [engine.store.get(i).status for i in ids]
    assert statuses.count(JobStatus.RUNNING) == 2 * slots
    hold.set()
    results = await engine.finishes(2 * slots + 1)
    assert all(r.outcome is Outcome.SUCCEEDED for r in results)


async def test_shutdown_interrupts_without_using_budget(engine: Engine) -> None:
    job = engine.add("sleep 30", max_attempts=1)
    await engine.started(job.id)
    engine.timer.stop()
    await engine.executor.shutdown(grace=0.05)
    [result] = await engine.finishes(1)
    assert result.outcome is Outcome.INTERRUPTED
    got = engine.store.get(job.id)
    assert (got.status, got.failures) == (JobStatus.SCHEDULED, 0)


async def test_priority_order_when_slots_are_scarce(engine: Engine) -> None:
    order = engine.tmp / "order"
    base = later(engine.clock, 10)
    for prio in (1, 5, 3, 9, 0, 7):
        engine.add(f"echo {prio} >> {order}", priority=prio, run_at=base)
    engine.executor.config = type(engine.executor.config)(
        concurrency=1, lease_ttl=30, kill_grace=0.5, log_dir=engine.tmp / "logs"
    )
    engine.clock.set(base)
    engine.timer.wake()
    await engine.finishes(6)
    assert order.read_text().split() == ["9", "7", "5", "3", "1", "0"]


def _group_gone(pgid: int, timeout: float = 5) -> bool:
    """Whether the group dies within ``timeout``: SIGKILL is delivered asynchronously and
    the group's orphans are not our children, so there is no exit event to wait on."""
    deadline = time.monotonic() + timeout
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is still in the group."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


async def test_the_tick_at_a_run_at_it_read_claims_before_reading_again(
    engine: Engine,
) -> None:
    """Issue 17's dispatch lag: the tick at the ``run_at`` the last read found claims
    first (the claim stamps ``started_at``), and reads the wakeups only after: a read (a
    store thread and back) no longer stands between the due instant and the start."""
    due = later(engine.clock, 60)
    job = engine.add("true", run_at=due)
    assert await engine.timer.run_once() == due  # read: the next run_at is ``due``
    calls: list[str] = []
    store: Any = engine.store
    for name in ("wakeups", "submit_claim_rows"):
        real = getattr(store, name)

        def counted(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append(_name)
            return _real(*args)

        setattr(store, name, counted)
    engine.clock.set(due)
    await engine.finishes(1)
    assert calls[:2] == ["submit_claim_rows", "wakeups"]
    assert engine.store.get(job.id).status is JobStatus.SUCCEEDED


async def test_a_backlog_is_claimed_without_reading_the_wakeups_each_tick(
    engine: Engine,
) -> None:
    """While claims get all they ask for, a freed slot is filled by a claim alone: the
    wakeups are read again only once a claim gets less than it asked (the backlog ended;
    or a second later). The claims are the writer's futures awaited from the loop, never a
    pool thread's ``claim_due``.

    The order is what is promised, not totals: once the backlog ended each freed slot
    wakes the timer, which reads (nothing is due), so under load (fewer, bigger claims)
    those reads can outnumber the claims: a count of them failed under load."""
    seen: list[str] = []  # in the timer's order: "read", or a claim that got "all"/"less"
    store: Any = engine.store
    wakeups, submit, claim_due = store.wakeups, store.submit_claim_rows, store.claim_due

    def read(*args: Any) -> Any:
        seen.append("read")
        return wakeups(*args)

    def claim(owner: str, limit: int, lease_ttl: float) -> Any:
        rows = submit(owner, limit, lease_ttl)  # told before the loop hears of the rows
        rows.add_done_callback(
            lambda f: seen.append("all" if len(f.result()[0]) == limit else "less")
        )
        return rows

    def pooled(*args: Any) -> Any:
        seen.append("claim_due")
        return claim_due(*args)

    store.wakeups, store.submit_claim_rows, store.claim_due = read, claim, pooled
    n = 4 * engine.executor.config.concurrency
    for _ in range(n):
        engine.add(["true"])
    results = await engine.finishes(n)
    assert all(r.outcome is Outcome.SUCCEEDED for r in results)
    assert "claim_due" not in seen and seen.count("all") > 1
    assert ("all", "read") not in itertools.pairwise(seen), seen


async def test_a_command_ended_when_its_start_is_answered_needs_no_record_task(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17: the spawn helper sends a quick command's exit with its start's answer;
    such an attempt has its record ride with the finish without a task, a timer or a wait
    made for the record (each cost the loop a few turns per job)."""
    spawn = engine.executor._spawn

    async def ended(*args: Any) -> Any:  # as the helper answers a quick command
        run = await spawn(*args)
        await asyncio.shield(run.exited)
        return run

    monkeypatch.setattr(engine.executor, "_spawn", ended)
    loop = asyncio.get_running_loop()
    made: list[str] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        made.append(coro.__qualname__)
        return asyncio.Task(coro, loop=loop, **kw)

    loop.set_task_factory(factory)
    calls = {"call_later": 0}
    later_ = loop.call_later

    def counted(*args: Any, **kw: Any) -> Any:
        calls["call_later"] += 1
        return later_(*args, **kw)

    monkeypatch.setattr(loop, "call_later", counted)
    try:
        jobs = [engine.add(["true"]) for _ in range(3)]
        await engine.finishes(3)
    finally:
        loop.set_task_factory(None)
    assert "Executor._record_unless_ended" not in made and made.count("Executor._run") == 3
    assert calls["call_later"] == 0
    for job in jobs:
        attempt = engine.store.get(job.id).attempts[-1]
        assert attempt.pid is not None and attempt.log_path


async def test_a_quick_commands_pid_is_recorded_with_its_finish_in_one_commit(
    engine: Engine,
) -> None:
    """A command that ends before RECORD_AFTER has its pid and log written with its
    finish (one commit); a longer one has them written while it runs."""
    sent = {"records": 0}
    alone = engine.astore.records._op

    async def counted(items: Any) -> Any:
        sent["records"] += len(items)
        return await alone(items)

    engine.astore.records._op = counted
    quick = engine.add(["true"])
    await engine.finishes(1)
    attempt = engine.store.get(quick.id).attempts[-1]
    assert sent["records"] == 0 and attempt.pid is not None and attempt.log_path
    slow = engine.add("sleep 0.3")
    await engine.started(slow.id)
    assert sent["records"] == 1
    await engine.finishes(2)
