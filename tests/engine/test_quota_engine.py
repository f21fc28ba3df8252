"""Quotas and a full store under the real executor (real processes, fake clock): the
running quota holds under the dispatcher, output is cut at the log cap, and a finish the
store cannot write is retried until it lands, never dropped."""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from jobctl.domain.quota import DiskFloor, Limits
from jobctl.domain.states import JobStatus, Outcome
from jobctl.engine.diskguard import DiskGuard
from jobctl.engine.process import CUT_MARK, log_cut_note
from tests.engine.conftest import Engine

pytestmark = pytest.mark.asyncio
# Two owners that exist (the owner is checked before a job starts): service accounts
# present on every Debian-like system. As root the commands really run as them.
A, B = pwd.getpwnam("daemon").pw_uid, pwd.getpwnam("bin").pw_uid


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory the owners' commands can see into (pytest's tmp dirs are 0700)."""
    with tempfile.TemporaryDirectory(prefix="jobctl-quota-") as name:
        os.chmod(name, 0o755)
        yield Path(name)


async def test_the_running_quota_holds_and_other_owners_go_on(
    engine: Engine, open_dir: Path
) -> None:
    engine.store.quota = lambda uid: Limits(running=1) if uid == A else Limits()
    gate = open_dir / "go"
    wait = f"while [ ! -e {gate} ]; do sleep 0.01; done"
    mine = [engine.add(wait, owner_uid=A, cwd="/") for _ in range(3)]
    theirs = [engine.add(wait, owner_uid=B, cwd="/") for _ in range(2)]
    async with asyncio.timeout(20):
        while engine.store.owner_usage(B)["running"] < 2:
            await asyncio.sleep(0.01)
    # Four slots, five due jobs: A's two others wait for A's first, B's both run.
    assert engine.store.owner_usage(A) == {"queued": 2, "running": 1, "schedules": 0}
    assert engine.executor.free_slots == 1
    # A tick with a free slot and only A's jobs due starts nothing and does not spin.
    assert await engine.timer.run_once() is None and engine.executor.free_slots == 1
    gate.touch()
    most = 0
    async with asyncio.timeout(20):
        while len(engine.finished) < 5:
            most = max(most, engine.store.owner_usage(A)["running"])
            await asyncio.sleep(0.005)
    assert most == 1
    assert all(engine.store.get(j.id).status is JobStatus.SUCCEEDED for j in mine + theirs)


async def test_output_past_the_log_cap_is_cut_and_the_command_goes_on(engine: Engine) -> None:
    engine.executor.config = replace(engine.executor.config, log_bytes=lambda uid: 5000)
    ok = engine.add("yes 0123456789 | head -c 100000; echo still running >&2; exit 0")
    [result] = await engine.finishes(1)
    assert result.outcome is Outcome.SUCCEEDED  # EFBIG, not SIGXFSZ: nothing was killed
    attempt = engine.store.get(ok.id).attempts[0]
    assert attempt.log_path  # 5120: whole 512-byte blocks of output, then the note
    with open(attempt.log_path, "rb") as log:  # the log itself says it was cut
        assert log.read(5120) == (b"0123456789\n" * 500)[:5120]
        assert log.read() == log_cut_note(5120)
    assert CUT_MARK in attempt.output_tail
    bad = engine.add("yes | head -c 100000; exit 3", max_attempts=1)
    results = await engine.finishes(2)
    assert results[-1].outcome is Outcome.FAILED
    assert results[-1].error == "exit code 3; output cut at 5120 bytes (log_bytes quota)"
    assert engine.store.get(bad.id).status is JobStatus.DEAD


async def test_a_finish_the_store_cannot_write_is_retried_until_it_lands(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """The database may not grow (``max_page_count``) when the command ends; the finish
    keeps being retried, far past the old ~8 s budget, and lands once it may grow."""
    caplog.set_level(logging.DEBUG, logger="jobctl.executor")
    gate = engine.tmp / "go"
    job = engine.add(f"while [ ! -e {gate} ]; do sleep 0.01; done; yes | head -c 4000")
    await engine.started(job.id)
    store = engine.store
    pages = store.db.writer.call(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    store.db.writer.outside_transaction(
        lambda c: c.execute(f"PRAGMA max_page_count={pages}").fetchall()
    )
    gate.touch()
    retries = 0
    async with asyncio.timeout(20):
        while retries < 12:  # 12 tries over a minute of the (fake) clock
            retries = sum("event=finish_retry" in r.getMessage() for r in caplog.records)
            engine.clock.advance(5)
            await asyncio.sleep(0.01)
    assert store.get(job.id).status is JobStatus.RUNNING and not engine.finished
    store.db.writer.outside_transaction(
        lambda c: c.execute("PRAGMA max_page_count=1073741823").fetchall()
    )
    async with asyncio.timeout(20):
        while not engine.finished:
            engine.clock.advance(5)
            await asyncio.sleep(0.01)
    assert store.get(job.id).status is JobStatus.SUCCEEDED
    assert "event=finish_abandoned" not in caplog.text


async def test_below_the_disk_floor_no_queued_job_starts_until_space_returns(
    engine: Engine,
) -> None:
    guard = DiskGuard([engine.tmp], DiskFloor(1 << 60), engine.clock)  # always below
    engine.timer._disk = guard
    job = engine.add("true")
    assert await engine.timer.run_once() == engine.clock.now() + timedelta(seconds=1)
    assert engine.store.get(job.id).status is JobStatus.SCHEDULED and not engine.finished
    guard.floor = DiskFloor()  # space is back (no floor at all)
    engine.clock.advance(1)  # the next measurement
    await engine.finishes(1)
    assert engine.store.get(job.id).status is JobStatus.SUCCEEDED
