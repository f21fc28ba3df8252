"""Shared fixtures: real SQLite files in temp dirs, a fake clock, seeded randomness.

A fixture's SQLite store starts as a copy of one database migrated once per session
(:func:`sqlite_template`): the same file the store's own migrations make, without running
23 migrations again for each of some thousand tests. Migrations themselves are tested in
tests/unit/test_store_internals.py and by every store a test opens on a path of its own.

Bytecode: the suite starts some thousand Python processes of jobctl (daemons, their spawn
helpers and witnesses, CLI runs). Where ``PYTHONDONTWRITEBYTECODE`` is set (as in many
container images, and on the machines this project runs on) an editable install has no
``.pyc`` files for them to load, so each of them compiled jobctl's sources again: about
a quarter of a daemon's start-up CPU. :func:`_compile_once` writes them (what ``pip
install`` does for a regular install); the variable still keeps every process from writing
any of its own. Test modules are rewritten by pytest; their cached rewrites are kept too.
"""

from __future__ import annotations

import compileall
import os
import random
import shutil
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import jobctl


def _compile_once() -> None:
    """Byte-compile jobctl's package (a no-op when its ``.pyc`` files are up to date: a
    stat of each file), and let pytest cache its rewrite of each test module. Every
    process of a run calls it: the writes are atomic renames, as Python's own."""
    compileall.compile_dir(Path(jobctl.__file__).parent, quiet=2)
    sys.dont_write_bytecode = False


_compile_once()

from jobctl.domain.clock import FakeClock  # noqa: E402 - compiled first
from jobctl.store.sqlite import SqliteStore  # noqa: E402

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


#: The order in which a parallel run (``./dev test``: pytest-xdist, one test file at a
#: time to a worker) hands out the test directories: the longest files first, so that
#: none of them starts last and runs alone while the other workers idle. Real daemons
#: (tests/integration, the drills) are most of the suite's time; tests/api's
#: schemathesis run is its longest file. Directories not named here come last.
PARALLEL_ORDER = ("api", "integration", "drills", "contract", "engine", "cli")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test a node id of its own, and in a pytest-xdist worker order the files
    as :data:`PARALLEL_ORDER` says (every worker collects the same order, which ``--dist
    loadfile`` with ``--no-loadscope-reorder`` follows); a run in one process keeps
    pytest's own order.

    schemathesis names all its tests of one function alike (``test_api``, one per
    operation): pytest-xdist, which hands out tests by node id, ran one of the 40 (580
    requests instead of 8,000). Such a test's id gets its name, which has the operation."""
    seen: dict[str, int] = {}
    for item in items:
        seen[item.nodeid] = seen.get(item.nodeid, 0) + 1
    for item in items:
        if seen[item.nodeid] > 1 and item.parent is not None:
            parent: Any = item.parent
            if hasattr(item, "_id"):  # pytest 9: a NodeId
                setattr(item, "_id", parent.id.child(item.name))  # noqa: B010
            else:  # pytest 8: a str
                setattr(item, "_nodeid", f"{parent.nodeid}::{item.name}")  # noqa: B010
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return

    def rank(item: pytest.Item) -> int:
        parts = item.nodeid.split("/")
        name = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
        return PARALLEL_ORDER.index(name) if name in PARALLEL_ORDER else len(PARALLEL_ORDER)

    items.sort(key=rank)  # stable: each file's tests stay together and in order
