"""A lease request whose worker hung up grants nothing (api/leases.py, docs/workers.md),
in-process: the connection's :class:`Hangup` is put in the request's state as the
server's protocol puts it. Seen before the claim: nothing is claimed. Seen while the
claim ran (the race the integration tests cannot time): what was claimed is released
(``interrupted``, no attempt of the budget used, due again at once) and not answered."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobctl.api.app import Hooks, create_app
from jobctl.api.worksignal import Hangup, WorkSignal
from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobSpec
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore

Setup = tuple[httpx.AsyncClient, SqliteStore, Hangup]


@pytest.fixture
async def setup(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Setup]:
    store = SqliteStore(tmp_path / "w.db", clock, random.Random(1))
    astore = AsyncStore(store, threads=2)
    app = create_app(astore, Hooks(work=WorkSignal()))
    hangup = Hangup()

    async def with_hangup(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        scope.setdefault("state", {})["hangup"] = hangup  # as PeerCredProtocol does
        await app(scope, receive, send)

    transport = httpx.ASGITransport(app=with_hangup)
    async with httpx.AsyncClient(transport=transport, base_url="http://jobctl") as client:
        spec = JobSpec(command=(), payload="1", run_at=clock.now(), owner_uid=0, queue="wq")
        store.insert([spec])
        yield client, store, hangup
    astore.close()
    store.close()


async def _job(client: httpx.AsyncClient) -> dict[str, Any]:
    [job] = (await client.get("/v1/jobs", params={"all_users": True})).json()["items"]
    full: dict[str, Any] = (await client.get(f"/v1/jobs/{job['id']}")).json()
    return full


async def test_a_hung_up_request_claims_nothing(setup: Setup) -> None:
    client, _, hangup = setup
    hangup.set()
    r = await client.post("/v1/leases", json={"queues": ["wq"], "wait": 30})
    assert r.status_code == 200 and r.json() == {"leases": []}  # at once, not after 30 s
    assert (await _job(client))["attempts"] == []


async def test_leases_claimed_as_the_worker_hung_up_are_released(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, store, hangup = setup
    lease = store.lease

    def lease_then_hang_up(*args: Any) -> Any:
        claims = lease(*args)
        hangup.seen = True  # the end of the stream read while the claim ran
        return claims

    monkeypatch.setattr(store, "lease", lease_then_hang_up)
    r = await client.post("/v1/leases", json={"queues": ["wq"], "max": 5})
    assert r.status_code == 200 and r.json() == {"leases": []}
    job = await _job(client)
    assert [a["outcome"] for a in job["attempts"]] == ["interrupted"]
    assert job["status"] == "scheduled" and job["failures"] == 0
    monkeypatch.setattr(store, "lease", lease)
    hangup.seen = False  # another worker, on another connection
    [again] = (await client.post("/v1/leases", json={"queues": ["wq"]})).json()["leases"]
    assert again["id"] == job["id"] and again["generation"] > 1
