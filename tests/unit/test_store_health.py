"""A corrupt database: recognised, refused at start, a degraded store while running."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobctl.domain.clock import FakeClock, SystemClock
from jobctl.domain.models import JobSpec
from jobctl.engine.service import Service
from jobctl.errors import StoreCorrupt
from jobctl.store import health
from jobctl.store.health import is_corruption
from jobctl.store.sqlite import SqliteStore

PAGE = 4096
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make_store(path: Path, jobs: int = 3000) -> None:
    """A store of ``jobs`` jobs due tomorrow, closed (so checkpointed into the file)."""
    clock = SystemClock()
    store = SqliteStore(path, clock, random.Random(1))
    tomorrow = clock.now() + timedelta(days=1)
    specs = [
        JobSpec(command=("true", str(i)), run_at=tomorrow, owner_uid=0, cwd="/")
        for i in range(jobs)
    ]
    store.insert(specs)
    store.close()


def damage_pages(path: Path, first: int = 3) -> None:
    """Overwrite every page from ``first`` on with random bytes (page 1 is the header)."""
    size = path.stat().st_size
    with path.open("r+b") as f:
        for page in range(first, size // PAGE):
            f.seek(page * PAGE)
            f.write(os.urandom(PAGE))


def test_corruption_is_recognised_by_code_and_by_message() -> None:
    notadb = sqlite3.DatabaseError("file is not a database")
    notadb.sqlite_errorcode = 26
    assert is_corruption(notadb)
    assert is_corruption(sqlite3.DatabaseError("database disk image is malformed"))
    assert not is_corruption(sqlite3.OperationalError("database is locked"))
    assert not is_corruption(sqlite3.OperationalError("disk I/O error"))
    assert not is_corruption(OSError("malformed"))


def test_damage_found_while_running_degrades_the_store_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "j.db"
    make_store(db)
    caplog.set_level(logging.ERROR, logger="jobctl")
    store = SqliteStore(db, FakeClock(T0), random.Random(1))
    try:
        assert store.degraded() is None
        damage_pages(db)  # the disk goes bad under the running store
        with pytest.raises(StoreCorrupt, match="is corrupt"):
            store.list_jobs(None, None, 500, None)
        degraded = store.degraded()
        assert degraded is not None and "degraded" in degraded
        before = db.read_bytes()
        for _ in range(20):
            with pytest.raises(StoreCorrupt):
                store.insert([JobSpec(command=("true",), run_at=T0, owner_uid=0, cwd="/")])
            with pytest.raises(StoreCorrupt):
                store.stats()
        assert db.read_bytes() == before  # refused without writing into the damaged file
    finally:
        store.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "event=store_corrupt" in lines[0], lines


class _Failing(Service):
    name = "failing"

    def __init__(self) -> None:
        super().__init__(SystemClock())
        self.passes = 0

    async def run_once(self) -> datetime | None:
        self.passes += 1
        raise StoreCorrupt("database x is corrupt")


async def test_a_service_that_finds_the_store_corrupt_parks_until_stopped() -> None:
    service = _Failing()
    task = asyncio.get_running_loop().create_task(service.run())
    for _ in range(50):
        service.wake()
        await asyncio.sleep(0)
    assert service.passes == 1 and service.parked
    service.stop()
    await asyncio.wait_for(task, 2)


def test_start_up_refuses_damage_a_large_file_shows_only_when_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above QUICK_CHECK_MAX_BYTES only the cheap check runs: damage to a page it does not
    read is found at run time instead (the test above)."""
    db = tmp_path / "j.db"
    make_store(db)
    size = db.stat().st_size
    with db.open("r+b") as f:  # one page in the middle of the jobs table
        f.seek((size // PAGE // 2) * PAGE)
        f.write(os.urandom(PAGE))
    with pytest.raises(StoreCorrupt, match="not starting on it"):
        SqliteStore(db, SystemClock()).close()
    monkeypatch.setattr(health, "QUICK_CHECK_MAX_BYTES", 0)
    SqliteStore(db, SystemClock()).close()  # not noticed at start
