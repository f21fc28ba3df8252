"""Start-up recovery: survivors of a dead daemon are stopped before their job runs again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobctl.domain.cluster import DaemonBeat
from jobctl.domain.models import Backoff
from jobctl.domain.states import JobStatus, Outcome
from jobctl.engine import witness
from jobctl.engine.process import process_start_time
from jobctl.engine.recovery import live_owners, recover
from tests.engine.conftest import Engine

# unique per test process: concurrent runs on one host must not find each other's survivors
DEAD = f"testhost:999:dead{os.getpid():x}"
NOW = Backoff(0, 0)  # a reclaimed job is due again at once: every crash finds it running


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def _claim_as_dead_daemon(engine: Engine) -> tuple[int, int]:
    engine.timer.stop()
    job = engine.add("sleep 30", max_attempts=3)
    [c] = engine.store.claim_due(DEAD, 1, 30)
    return job.id, c.generation


def _spawn(procs: list[subprocess.Popen[bytes]], env: dict[str, str]) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(
        ["sleep", "30"], env={"PATH": os.environ["PATH"], **env}, start_new_session=True
    )
    procs.append(p)
    # until exec, /proc shows the test's own environment: wait for it, as a real survivor
    # of a dead daemon is long past its exec
    cmdline = Path(f"/proc/{p.pid}/cmdline")
    for _ in range(500):
        if cmdline.read_bytes().startswith(b"sleep"):
            break
        time.sleep(0.01)
    return p


async def test_unrecorded_survivor_is_found_by_environment_and_stopped(
    engine: Engine, procs: list[subprocess.Popen[bytes]]
) -> None:
    job_id, gen = _claim_as_dead_daemon(engine)
    survivor = _spawn(procs, {"JOBCTL_JOB_ID": str(job_id), "JOBCTL_LEASE_OWNER": DEAD})
    assert await recover(engine.astore, engine.executor.owner, grace=2) == 1
    assert survivor.wait(timeout=5) == -15  # SIGTERM
    job = engine.store.get(job_id)
    assert job.status is JobStatus.SCHEDULED and job.generation == gen
    assert job.attempts[0].outcome is Outcome.LEASE_EXPIRED
    assert "died while the job ran" in (job.attempts[0].error or "")


async def test_recorded_pid_is_stopped_but_a_recycled_pid_is_not(
    engine: Engine, procs: list[subprocess.Popen[bytes]]
) -> None:
    job_id, gen = _claim_as_dead_daemon(engine)
    innocent = _spawn(procs, {})
    start = process_start_time(innocent.pid)
    assert start is not None
    engine.store.record_process(job_id, gen, innocent.pid, start + 1, "/nowhere")
    assert await recover(engine.astore, engine.executor.owner, grace=2) == 1
    assert innocent.poll() is None  # other start time: not the job's process

    job2, gen2 = _claim_as_dead_daemon(engine)
    real = _spawn(procs, {})
    engine.store.record_process(job2, gen2, real.pid, process_start_time(real.pid), "/x")
    assert await recover(engine.astore, engine.executor.owner, grace=2) == 1
    assert real.wait(timeout=5) == -15


async def test_other_hosts_leases_are_left_to_expire(engine: Engine) -> None:
    engine.timer.stop()
    job = engine.add("true")
    engine.store.claim_due("otherhost:5:abc", 1, 30)
    assert await recover(engine.astore, engine.executor.owner, grace=1) == 0
    assert engine.store.get(job.id).status is JobStatus.RUNNING


def _crash(engine: Engine, n: int, procs: list[subprocess.Popen[bytes]], alive: set[int]) -> str:
    """Daemon ``n`` of this host claims every due job and is killed: the commands of the
    jobs in ``alive`` outlive it (as a ``kill -9`` leaves them), the others had exited."""
    owner = f"testhost:{1000 + n}:dead{n:02d}{os.getpid():x}"  # as DEAD: per test process
    for claim in engine.store.claim_due(owner, 100, 30):
        if claim.job.id in alive:
            env = {"JOBCTL_JOB_ID": str(claim.job.id), "JOBCTL_LEASE_OWNER": owner}
            _spawn(procs, env)
    engine.clock.advance(5)
    return owner


async def test_unrelated_crashes_never_make_healthy_jobs_poison(
    engine: Engine, procs: list[subprocess.Popen[bytes]]
) -> None:
    """Issue 13: long jobs running at every kill -9 of the daemon ended ``poison`` at the
    third, whatever their --max-attempts; those commands had outlived each crash."""
    engine.timer.stop()
    long = [
        engine.add("sleep 30", key=f"long{i}", max_attempts=5, backoff=NOW).id for i in range(3)
    ]
    short = [engine.add("true", key=f"short{i}", max_attempts=5, backoff=NOW).id for i in range(2)]
    for n in range(4):
        _crash(engine, n, procs, alive=set(long))
        assert await recover(engine.astore, engine.executor.owner, grace=2) == 5
        jobs = [engine.store.get(i) for i in long + short]
        assert all(j.status is JobStatus.SCHEDULED for j in jobs), [j.dead_reason for j in jobs]
    # the budget still holds: the fifth crash is the fifth attempt lost
    _crash(engine, 4, procs, alive=set(long))
    await recover(engine.astore, engine.executor.owner, grace=2)
    reasons = {engine.store.get(i).dead_reason for i in long + short}
    assert reasons == {"lease_expired"}


async def test_a_job_alone_at_every_crash_is_poison_before_its_budget_is_spent(
    engine: Engine, procs: list[subprocess.Popen[bytes]]
) -> None:
    engine.timer.stop()
    bystander = engine.add("sleep 30", key="bystander", max_attempts=9, backoff=NOW)
    culprit = engine.add("true", key="culprit", max_attempts=5, backoff=NOW)
    for n in range(3):
        _crash(engine, n, procs, alive={bystander.id})
        assert await recover(engine.astore, engine.executor.owner, grace=2) == 2
    job = engine.store.get(culprit.id)
    assert (job.status, job.dead_reason, job.failures) == (JobStatus.DEAD, "poison", 3)
    assert engine.store.get(bystander.id).status is JobStatus.SCHEDULED


async def test_a_command_the_witness_saw_alive_at_the_death_is_no_suspect(
    engine: Engine, procs: list[subprocess.Popen[bytes]]
) -> None:
    """Gone at restart but alive when the daemon died: it finished meanwhile, innocently."""
    engine.timer.stop()
    db = engine.tmp / "w.db"
    folder = witness.witness_dir(db)
    folder.mkdir()
    job = engine.add("true", key="finished-meanwhile", max_attempts=5, backoff=NOW)
    for n in range(4):
        owner = _crash(engine, n, procs, alive=set())
        (folder / f"{owner}.json").write_text(json.dumps({"owner": owner, "alive": [job.id]}))
        assert await recover(engine.astore, engine.executor.owner, grace=2, db=db) == 1
        assert not any(folder.glob("*.json"))
        assert engine.store.get(job.id).status is JobStatus.SCHEDULED


def test_the_witness_lists_the_commands_alive_when_its_daemon_dies(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    db, owner = tmp_path / "j.db", "testhost:4242:w1"
    first = witness.Witness(db, owner)
    first.stop()  # a clean stop leaves no evidence
    assert not any(witness.witness_dir(db).glob("*.json"))
    _spawn(procs, {"JOBCTL_JOB_ID": "7", "JOBCTL_LEASE_OWNER": owner})
    w = witness.Witness(db, owner)
    for _ in range(500):  # a real witness is long past its exec when its daemon dies
        if witness._witness_running(owner):
            break
        time.sleep(0.01)
    log = tmp_path / "8.1.log"
    log.touch()  # the spawn of job 8 got as far as its log file
    w.starting(8, 1, log)
    w.starting(9, 1, tmp_path / "9.1.log")  # claimed; not spawned yet (no log file)
    w.starting(10, 2, tmp_path / "10.2.log")
    w.exited(10, 2, 0)  # exited 0; its result not written yet
    w.starting(11, 1, tmp_path / "11.1.log")
    w.done(11, 1)  # in the store: forgotten
    os.close(w._write)  # what the kernel does when the daemon dies
    seen = witness.witnessed(db, owner, wait=10)
    assert seen is not None and seen.alive == {7} and seen.complete
    assert seen.attempts == {(8, 1): (True, None), (9, 1): (False, None), (10, 2): (False, 0)}
    assert (seen.started(9, 1), seen.started(12, 1), seen.exit_code(10, 2)) == (False, False, 0)
    w._proc.wait(5)


async def test_an_orphan_another_daemon_reclaimed_first_is_skipped(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Daemons sharing PostgreSQL: between recovery's read of the running jobs and its
    reclaim, another daemon reclaimed the expired lease. Recovery skips that job (its
    generation moved: nothing changes) and the daemon starts."""
    job_id, gen = _claim_as_dead_daemon(engine)
    stale = engine.store.running()
    engine.store.reclaim(job_id, gen, "reclaimed by another daemon")
    monkeypatch.setattr(engine.store, "running", lambda: stale)
    assert await recover(engine.astore, engine.executor.owner, grace=1) == 0
    job = engine.store.get(job_id)
    assert job.status is JobStatus.SCHEDULED and len(job.attempts) == 1
    assert job.attempts[0].error == "reclaimed by another daemon"


def test_live_daemons_of_this_host_are_the_seen_ones_whose_process_is_there() -> None:
    """Two daemons on one host share PostgreSQL: start-up recovery must leave the jobs of
    the other live one alone, but not those of a daemon killed and restarted at once."""
    now = datetime(2030, 1, 1, tzinfo=UTC)
    dead_child = subprocess.Popen(["true"])
    dead_child.wait()

    def beat(owner: str, pid: int, seen_ago: float) -> DaemonBeat:
        host = owner.split(":", maxsplit=1)[0]
        last = now - timedelta(seconds=seen_ago)
        return DaemonBeat(owner, host, pid, "1", now, last, 0, 4, 10.0)

    beats = [
        beat("h:1:live", os.getpid(), 5),  # seen, process there
        beat("h:2:restarted", dead_child.pid, 5),  # seen, process gone (kill -9)
        beat("h:3:silent", os.getpid(), 31),  # not seen for 3 TTLs
        beat("other:4:x", os.getpid(), 1),  # another host's: its leases expire
    ]
    assert live_owners(beats, "h", now) == {"h:1:live"}


def test_a_gap_in_the_feed_makes_an_unnamed_attempt_unknown_not_unstarted() -> None:
    feed = witness.Feed()
    for line in (b'1 i 5 1 "/nowhere/5.1.log"', b"2 x 5 1 0", b"4 d 6 1"):  # 3 was lost
        feed.take(line)
    assert not feed.complete and feed.evidence() == [[5, 1, False, 0]]
    seen = witness.Seen(set(), feed.complete, {(5, 1): (False, 0)})
    assert (seen.started(5, 1), seen.started(6, 1)) == (False, None)
    garbled = witness.Feed()
    garbled.take(b"1 i nonsense")
    assert not garbled.complete
    for bad in (b'1 i 5 1 "/no\\q.log', b"1 i 5 1 7", b'1 i 5 1 "\xff"'):
        unread = witness.Feed()  # a path that does not read: found out at the death
        unread.take(bad)
        assert unread.complete and unread.evidence() == [[5, 1, None, None]]
        assert not unread.complete
    status = witness.Feed()
    status.take(b'1 i 5 1 "/nowhere/5.1.log"')
    status.take(b"2 x 5 1 zero")
    assert status.evidence() == [[5, 1, False, None]] and not status.complete
    old = witness.Seen({3})  # a witness file of an older release: nothing but "alive"
    assert old.started(4, 1) is None


def test_a_full_pipe_drops_lines_without_blocking_the_daemon(tmp_path: Path) -> None:
    db, owner = tmp_path / "j.db", "testhost:4243:w2"
    w = witness.Witness(db, owner)
    os.kill(w._proc.pid, signal.SIGSTOP)  # a witness the scheduler never runs
    try:
        for i in range(witness.PIPE_SIZE // 16):
            w.starting(i, 1, tmp_path / f"{i}.log")  # must never block
    finally:
        os.kill(w._proc.pid, signal.SIGCONT)
    os.close(w._write)
    seen = witness.witnessed(db, owner, wait=30)
    assert seen is not None and not seen.complete
    w._proc.wait(5)


async def test_a_job_started_first_after_each_restart_is_not_poison_when_it_never_ran(
    engine: Engine, procs: list[subprocess.Popen[bytes]]
) -> None:
    """Issue 13: reclaimed jobs are started first after a restart, so a daemon killed from
    outside a moment after each start found the same job claimed but not spawned yet (or
    done, its result not yet written): gone, the lone suspect, ``poison`` at the third kill."""
    engine.timer.stop()
    db = engine.tmp / "w.db"
    folder = witness.witness_dir(db)
    folder.mkdir()
    job = engine.add("true", key="first", max_attempts=9, backoff=NOW)
    bystander = engine.add("sleep 30", key="bystander", max_attempts=9, backoff=NOW)
    # not spawned (no log file), seen to exit 0, not spawned again
    for n, (started, code) in enumerate([(False, None), (True, 0), (False, None)]):
        owner = _crash(engine, n, procs, alive={bystander.id})
        attempts = [[job.id, engine.store.get(job.id).generation, started, code]]
        evidence = {"owner": owner, "alive": [bystander.id], "complete": True, "attempts": attempts}
        (folder / f"{owner}.json").write_text(json.dumps(evidence))
        assert await recover(engine.astore, engine.executor.owner, grace=2, db=db) == 2
        got = engine.store.get(job.id)
        assert got.status is JobStatus.SCHEDULED, (n, got.dead_reason)


async def test_the_culprit_beside_jobs_not_started_or_done_is_still_poison(
    engine: Engine, procs: list[subprocess.Popen[bytes]]
) -> None:
    """Once the feed clears the jobs not started and done, the culprit is singled out
    (before, all three were suspects at every crash and none was caught)."""
    engine.timer.stop()
    db = engine.tmp / "w.db"
    folder = witness.witness_dir(db)
    folder.mkdir()
    first = engine.add("true", key="first", max_attempts=9, backoff=NOW)
    done = engine.add("true", key="done", max_attempts=9, backoff=NOW)
    culprit = engine.add("true", key="culprit", max_attempts=9, backoff=NOW)
    for n in range(3):
        owner = _crash(engine, n, procs, alive=set())
        gens = {i: engine.store.get(i).generation for i in (first.id, done.id, culprit.id)}
        log = engine.tmp / f"culprit.{n}.log"
        log.touch()  # the culprit's spawn reached its log file: it ran
        attempts = [
            [first.id, gens[first.id], False, None],  # its log file never made: not spawned
            [done.id, gens[done.id], True, 0],  # the daemon saw it exit 0
            [culprit.id, gens[culprit.id], True, None],
        ]
        evidence = {"owner": owner, "alive": [], "complete": True, "attempts": attempts}
        (folder / f"{owner}.json").write_text(json.dumps(evidence))
        assert await recover(engine.astore, engine.executor.owner, grace=2, db=db) == 3
    assert engine.store.get(first.id).status is JobStatus.SCHEDULED
    assert engine.store.get(done.id).status is JobStatus.SCHEDULED
    bad = engine.store.get(culprit.id)
    assert (bad.status, bad.dead_reason) == (JobStatus.DEAD, "poison")


async def test_a_job_the_feed_never_named_is_no_suspect_only_when_the_feed_is_whole(
    engine: Engine, procs: list[subprocess.Popen[bytes]]
) -> None:
    engine.timer.stop()
    db = engine.tmp / "w.db"
    folder = witness.witness_dir(db)
    folder.mkdir()
    job = engine.add("true", key="claimed", max_attempts=9, backoff=NOW)
    for n, complete in enumerate((True, True, False, False, False)):
        owner = _crash(engine, n, procs, alive=set())
        evidence = {"owner": owner, "alive": [], "complete": complete, "attempts": []}
        (folder / f"{owner}.json").write_text(json.dumps(evidence))
        await recover(engine.astore, engine.executor.owner, grace=2, db=db)
        dead = engine.store.get(job.id).dead_reason == "poison"
        assert dead is (n == 4), n  # three crashes in a row with a gap in the account
