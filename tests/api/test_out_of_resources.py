"""Running out of descriptors or memory while answering is transient: 503 + Retry-After
JSON, never a 500 (issue 11: resource exhaustion is never a failure of the request)."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobctl.api.app import create_app
from jobctl.errors import OutOfResources, StorageFull
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore
from jobctl.store.writer import resource_error


def test_descriptor_and_memory_errors_are_out_of_resources(tmp_path: Path) -> None:
    for code in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN):
        found = resource_error(OSError(code, "x"))
        assert isinstance(found, OutOfResources) and found.details["retry_after"] > 0
    with pytest.raises(sqlite3.OperationalError) as cantopen:  # a real SQLITE_CANTOPEN
        sqlite3.connect(tmp_path / "no" / "such" / "dir.db")
    assert isinstance(resource_error(cantopen.value), OutOfResources)
    assert resource_error(OSError(errno.ENOENT, "x")) is None
    assert resource_error(ValueError("x")) is None


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (OSError(errno.EMFILE, "Too many open files"), "out_of_resources"),
        (OSError(errno.ENOSPC, "No space left on device"), "storage_full"),
    ],
)
async def test_a_read_that_runs_out_answers_503_json(
    app_store: SqliteStore, monkeypatch: Any, error: OSError, code: str
) -> None:
    def out(*args: Any) -> Any:
        raise error

    monkeypatch.setattr(app_store, "stats", out)
    astore = AsyncStore(app_store, threads=2)
    app = create_app(astore)
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://jobctl") as c:
            answer = await c.get("/v1/status")
            other = await c.get("/v1/jobs")  # everything else goes on
    finally:
        astore.close()
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == code
    assert int(answer.headers["retry-after"]) >= 1
    assert other.status_code == 200


async def test_the_async_store_raises_the_refusal(app_store: SqliteStore, monkeypatch: Any) -> None:
    def out(*args: Any) -> Any:
        raise OSError(errno.ENFILE, "Too many open files in system")

    monkeypatch.setattr(app_store, "stats", out)
    astore = AsyncStore(app_store, threads=1)
    try:
        with pytest.raises(OutOfResources) as got:
            await astore.run(app_store.stats)
        assert not isinstance(got.value, StorageFull)
        assert isinstance(got.value.__cause__, OSError)
    finally:
        astore.close()
