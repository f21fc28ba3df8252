"""Backpressure and quotas at the API, in-process on a real SQLite file and real statvfs:
503 JSON + Retry-After below the disk floor and on a full disk, 429 + Retry-After over a
quota, and ``status`` showing both."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobctl.api.app import Hooks, create_app
from jobctl.domain.clock import FakeClock
from jobctl.domain.quota import DiskFloor, Limits, QuotaPolicy
from jobctl.engine.diskguard import DiskGuard
from jobctl.engine.quotas import Admission, Quotas
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore

JOB = {"command": ["true"]}
HUGE = DiskFloor(1 << 60)  # more than any disk has: always below the floor
NO_FLOOR, NO_LIMITS = DiskFloor(), Limits()


def _gate(tmp: Path, clock: FakeClock, floor: DiskFloor, limits: Limits) -> Admission:
    return Admission(DiskGuard([tmp], floor, clock), Quotas(QuotaPolicy(limits), clock))


@pytest.fixture
async def make_api(app_store: SqliteStore, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Any]:
    clients: list[httpx.AsyncClient] = []
    astore = AsyncStore(app_store, threads=4)

    async def make(floor: DiskFloor = NO_FLOOR, limits: Limits = NO_LIMITS) -> Any:
        gate = _gate(tmp_path, clock, floor, limits)
        app_store.quota = gate.limits_for
        app = create_app(astore, Hooks(admission=gate))
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://j")
        clients.append(client)
        return client

    yield make
    for c in clients:
        await c.aclose()
    astore.close()


def _refused(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert int(r.headers["retry-after"]) >= 1
    err: dict[str, Any] = r.json()["error"]
    assert err["code"] == code
    return err


async def test_below_the_floor_new_work_gets_503_and_status_says_so(
    make_api: Any, app_store: SqliteStore, clock: FakeClock
) -> None:
    ok = await make_api()
    sched = (await ok.post("/v1/schedules", json={"job": JOB, "every": 60})).json()
    low = await make_api(HUGE)
    err = _refused(await low.post("/v1/jobs", json=JOB), 503, "disk_low")
    assert "below the floor" in err["message"] and err["free_bytes"] < err["floor_bytes"]
    _refused(await low.post("/v1/jobs", json=[JOB, JOB]), 503, "disk_low")
    _refused(await low.post("/v1/schedules", json={"job": JOB, "every": 60}), 503, "disk_low")
    _refused(await low.post(f"/v1/schedules/{sched['id']}/trigger"), 503, "disk_low")
    _refused(await low.post("/v1/dlq/replay", json={"limit": 5}), 503, "disk_low")
    status = (await low.get("/v1/status")).json()
    assert status["disk"]["refusing"] is True
    assert status["disk"]["filesystems"][0]["low"] is True
    # Reads and cancels still work: the floor holds back new work only.
    assert (await low.get("/v1/jobs")).status_code == 200
    assert sum(q.scheduled for q in app_store.stats()) == 0
    assert (await ok.post("/v1/jobs", json=JOB)).status_code == 201


async def test_a_full_database_is_503_json_never_a_plain_500(
    make_api: Any, app_store: SqliteStore
) -> None:
    client = await make_api()
    assert (await client.post("/v1/jobs", json=JOB)).status_code == 201
    pages = app_store.db.writer.call(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    app_store.db.writer.outside_transaction(
        lambda c: c.execute(f"PRAGMA max_page_count={pages}").fetchall()
    )
    big = [{"command": ["x" * 4000]}] * 50
    _refused(await client.post("/v1/jobs", json=big), 503, "storage_full")
    _refused(await client.post("/v1/schedules", json={"job": big[0], "every": 60}), 503,
             "storage_full")  # fmt: skip
    app_store.db.writer.outside_transaction(
        lambda c: c.execute("PRAGMA max_page_count=1073741823").fetchall()
    )
    assert (await client.post("/v1/jobs", json=big)).status_code == 201


async def test_each_quota_answers_429_with_retry_after(make_api: Any, clock: FakeClock) -> None:
    client = await make_api(limits=Limits(queued=3, schedules=1, enqueue_rate=2, enqueue_burst=5))
    assert (await client.post("/v1/jobs", json=[JOB, JOB])).status_code == 201
    err = _refused(await client.post("/v1/jobs", json=[JOB, JOB]), 429, "quota_exceeded")
    assert err["quota"] == "queued" and err["limit"] == 3 and err["used"] == 2
    assert (await client.post("/v1/jobs", json=JOB)).status_code == 201
    err = _refused(await client.post("/v1/jobs", json=JOB), 429, "quota_exceeded")
    assert err["quota"] == "enqueue_rate"  # 5 tokens spent (the refused batch too)
    clock.advance(1)
    err = _refused(await client.post("/v1/jobs", json=JOB), 429, "quota_exceeded")
    assert err["quota"] == "queued"
    assert (await client.post("/v1/schedules", json={"job": JOB, "every": 60})).status_code == 201
    err = _refused(
        await client.post("/v1/schedules", json={"job": JOB, "every": 60}), 429, "quota_exceeded"
    )
    assert err["quota"] == "schedules"
    usage = (await client.get("/v1/status")).json()["quota"]
    assert usage["uid"] == os.geteuid()
    assert usage["queued"] == {"used": 3, "limit": 3}
    assert usage["schedules"] == {"used": 1, "limit": 1}
    assert usage["running"] == {"used": 0, "limit": None}
    assert usage["enqueue_rate"]["limit"] == 2
