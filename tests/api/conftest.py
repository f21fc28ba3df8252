"""The API in-process over httpx's ASGI transport, on a real SQLite file."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from jobctl.api.app import Hooks, create_app
from jobctl.domain.clock import FakeClock
from jobctl.domain.states import StopReason
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore
from tests.conftest import migrated


@pytest.fixture
def app_store(tmp_path: Path, clock: FakeClock, sqlite_template: Path) -> Iterator[SqliteStore]:
    """The store behind the ``api`` fixture, for arranging states the API cannot make."""
    store = SqliteStore(migrated(sqlite_template, tmp_path / "api.db"), clock, random.Random(1))
    yield store
    store.close()


@pytest.fixture
async def api(app_store: SqliteStore) -> AsyncIterator[tuple[httpx.AsyncClient, list[str]]]:
    store = app_store
    astore = AsyncStore(store, threads=4)
    events: list[str] = []

    def stop_job(job_id: int, reason: StopReason) -> bool:
        events.append(f"stop {job_id}")
        return True

    hooks = Hooks(
        wake=lambda: events.append("wake"),
        due=lambda at: events.append("wake"),
        stop_job=stop_job,
        queue_paused=lambda name: events.append(f"paused {name}"),
    )
    app = create_app(astore, hooks)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://jobctl"
    ) as client:
        yield client, events
    astore.close()
