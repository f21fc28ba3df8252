"""The store contract suite runs once per backend; add a backend to BACKENDS."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.store.base import Store
from jobctl.store.sqlite import SqliteStore


def _sqlite(tmp_path: Path, clock: FakeClock) -> Store:
    return SqliteStore(tmp_path / "contract.db", clock, random.Random(7))


BACKENDS: dict[str, Callable[[Path, FakeClock], Store]] = {"sqlite": _sqlite}


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    backend = BACKENDS[request.param](tmp_path, clock)
    yield backend
    backend.close()
