"""Shared fixtures: real SQLite files in temp dirs, a fake clock, seeded randomness."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.store.sqlite import SqliteStore

T0 = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def sqlite_store(tmp_path: Path, clock: FakeClock) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "jobs.db", clock, random.Random(7))
    yield store
    store.close()
