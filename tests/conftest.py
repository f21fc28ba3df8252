"""Shared fixtures: real SQLite files in temp dirs, a fake clock, seeded randomness.

A fixture's SQLite store starts as a copy of one database migrated once per session
(:func:`sqlite_template`): the same file the store's own migrations make, without running
23 migrations again for each of some thousand tests. Migrations themselves are tested in
tests/unit/test_store_internals.py and by every store a test opens on a path of its own."""

from __future__ import annotations

import random
import shutil
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


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite store, migrated by :class:`SqliteStore` itself and closed (its WAL
    checkpointed into the file, which is then all there is to copy)."""
    path = tmp_path_factory.mktemp("template") / "template.db"
    SqliteStore(path, FakeClock(T0)).close()
    assert not path.with_name(path.name + "-wal").exists(), "the WAL outlived the close"
    return path


def migrated(template: Path, path: Path) -> Path:
    """``path``: a fresh copy of the migrated ``template`` (see :func:`sqlite_template`)."""
    shutil.copyfile(template, path)
    return path


@pytest.fixture
def sqlite_store(tmp_path: Path, clock: FakeClock, sqlite_template: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(migrated(sqlite_template, tmp_path / "jobs.db"), clock, random.Random(7))
    yield store
    store.close()
