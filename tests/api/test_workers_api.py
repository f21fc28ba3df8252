"""Payload jobs and the leases API in-process (issue 16, docs/workers.md): a payload is
kept and shown, refused when too large, beyond +-2^53 or beside a command; a worker
queue refuses command jobs; a long-poll sleeps until the work signal, not its timeout;
complete and fail are fenced by the generation, and a repeat of the recorded outcome
answers 200 again."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobctl.api.app import Hooks, create_app
from jobctl.api.worksignal import WorkSignal
from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobSpec
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore

Api = tuple[httpx.AsyncClient, list[str]]


async def test_a_payload_job_is_kept_and_shown(api: Api) -> None:
    client, _ = api
    body = {"payload": {"task": "m:f", "kwargs": {"to": "a@b", "n": [1, 2.5]}}, "queue": "wq"}
    r = await client.post("/v1/jobs", json=body | {"key": "k"})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["payload"] == body["payload"] and job["command"] == []
    again = await client.post("/v1/jobs", json=body | {"key": "k"})
    assert again.status_code == 200 and again.json()["id"] == job["id"]
    queues = {q["queue"]: q for q in (await client.get("/v1/queues")).json()}
    assert queues["wq"]["workers"] == []


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"payload": "x" * 70_000}, 422, "at most 65536 bytes"),
        ({"payload": [2**60]}, 422, "less than 9007199254740992"),
        ({"payload": 1, "command": ["true"]}, 422, "payload"),
        ({"payload": 1, "env": {"A": "1"}}, 422, "takes no env"),
        ({"payload": None}, 422, "either command or http"),
        ({"payload": 1, "retry_on": [1], "nice": 0}, 422, "takes no retry_on, nice"),
    ],
)
async def test_a_bad_payload_job_is_refused(
    api: Api, body: dict[str, Any], status: int, words: str
) -> None:
    client, _ = api
    r = await client.post("/v1/jobs", json=body | {"queue": "wq"})
    assert r.status_code == status, r.text
    assert words in r.json()["error"]["message"]


async def test_a_number_at_the_bound_is_refused_as_an_integer_and_as_a_float(api: Api) -> None:
    """2^53 and 2^53.0 are one JSON number (the OpenAPI document says so): both are refused,
    and so is an integer past the bound that a float would round onto it; 2^53-1 is kept."""
    client, _ = api
    for n in (2**53 - 1, -(2**53 - 1), 2.5e15):
        r = await client.post("/v1/jobs", json={"payload": [n], "queue": "wq"})
        assert r.status_code == 201, (n, r.text)
        assert r.json()["payload"] == [n]
    for n in (2**53, float(2**53), 2**53 + 1, -(2**53), -float(2**53)):
        r = await client.post("/v1/jobs", json={"payload": [n], "queue": "wq"})
        assert r.status_code == 422, (n, r.text)


async def test_a_worker_queue_takes_payload_jobs_only(api: Api) -> None:
    client, _ = api
    assert (await client.post("/v1/jobs", json={"payload": 1, "queue": "wq"})).status_code == 201
    r = await client.post("/v1/jobs", json={"command": ["true"], "queue": "wq"})
    assert r.status_code == 409 and "served by workers" in r.json()["error"]["message"]
    assert (await client.post("/v1/jobs", json={"command": ["true"]})).status_code == 201
    r = await client.post("/v1/jobs", json={"payload": 1})  # the default queue has a command
    assert r.status_code == 409 and "queue of their own" in r.json()["error"]["message"]


async def test_complete_is_fenced_and_a_repeat_answers_200(api: Api) -> None:
    client, _ = api
    await client.post("/v1/jobs", json={"payload": 1, "queue": "wq"})
    [lease] = (await client.post("/v1/leases", json={"queues": ["wq"]})).json()["leases"]
    assert lease["attempt"] == 1 and lease["heartbeat_every"] == 10.0
    url = f"/v1/leases/{lease['id']}"
    gen = {"generation": lease["generation"]}
    assert (await client.post(f"{url}/heartbeat", json=gen)).status_code == 200
    done = await client.post(f"{url}/complete", json=gen | {"result": {"sent": True}})
    assert done.status_code == 200 and done.json()["status"] == "succeeded"
    assert done.json()["repeated"] is False
    again = await client.post(f"{url}/complete", json=gen | {"result": {"sent": True}})
    assert again.status_code == 200 and again.json()["repeated"] is True
    for action, extra in (("fail", {"error": "x"}), ("heartbeat", {})):
        r = await client.post(f"{url}/{action}", json=gen | extra)
        assert r.status_code == 409 and r.json()["error"]["code"] == "lease_lost", r.text
    stale = await client.post(f"{url}/complete", json={"generation": lease["generation"] + 1})
    assert stale.status_code == 409
    attempts = (await client.get(f"/v1/jobs/{lease['id']}")).json()["attempts"]
    assert [a["output_tail"] for a in attempts] == ['{"sent":true}']


async def test_a_not_retryable_failure_is_dead_at_once(api: Api) -> None:
    client, _ = api
    await client.post("/v1/jobs", json={"payload": 1, "queue": "wq", "max_attempts": 5})
    [lease] = (await client.post("/v1/leases", json={"queues": ["wq"]})).json()["leases"]
    body = {"generation": lease["generation"], "error": "Traceback…", "retryable": False}
    r = await client.post(f"/v1/leases/{lease['id']}/fail", json=body)
    assert r.json()["status"] == "dead" and r.json()["dead_reason"] == "non_retryable"


@pytest.fixture
async def signalled(
    tmp_path: Path, clock: FakeClock
) -> AsyncIterator[tuple[httpx.AsyncClient, SqliteStore, WorkSignal]]:
    store = SqliteStore(tmp_path / "w.db", clock, random.Random(1))
    astore = AsyncStore(store, threads=2)
    signal = WorkSignal()
    app = create_app(astore, Hooks(work=signal))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://jobctl"
    ) as client:
        yield client, store, signal
    astore.close()
    store.close()


async def test_a_long_poll_sleeps_until_the_work_signal(
    signalled: tuple[httpx.AsyncClient, SqliteStore, WorkSignal], clock: FakeClock
) -> None:
    client, store, signal = signalled
    body = {"queues": ["wq"], "wait": 30}
    began = time.monotonic()
    poll = asyncio.create_task(client.post("/v1/leases", json=body))
    while not signal._waiters:  # the request sleeps on the signal (no store loop)
        await asyncio.sleep(0.005)
    spec = JobSpec(command=(), payload="1", run_at=clock.now(), owner_uid=0, queue="wq")
    await asyncio.to_thread(store.insert, [spec])
    signal.notify()
    r = await asyncio.wait_for(poll, 10)
    assert [x["payload"] for x in r.json()["leases"]] == [1]
    assert time.monotonic() - began < 10  # woken, not timed out


async def test_a_path_with_a_final_newline_is_not_its_parent(api: Api) -> None:
    client, _ = api
    r = await client.delete("/v1/schedules/%0A")
    assert r.status_code == 404, r.text


async def _lease_one(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.post("/v1/leases", json={"queues": ["wq"]})
    [lease] = r.json()["leases"]
    return dict(lease)


async def test_a_release_gives_the_job_back_without_using_an_attempt(
    api: Api, clock: FakeClock
) -> None:
    client, _ = api
    await client.post("/v1/jobs", json={"payload": 1, "queue": "wq", "max_attempts": 1})
    lease = await _lease_one(client)
    url = f"/v1/leases/{lease['id']}/release"
    r = await client.post(url, json={"generation": lease["generation"]})
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["status"] == "scheduled" and job["failures"] == 0 and job["repeated"] is False
    attempts = (await client.get(f"/v1/jobs/{lease['id']}")).json()["attempts"]
    assert [a["outcome"] for a in attempts] == ["interrupted"]
    again = await client.post(url, json={"generation": lease["generation"]})
    assert again.status_code == 200 and again.json()["repeated"] is True
    second = await _lease_one(client)  # due again at once; max_attempts 1 is not spent
    assert second["id"] == lease["id"] and second["generation"] == lease["generation"] + 1
    gen2 = {"generation": second["generation"]}
    done = await client.post(f"/v1/leases/{lease['id']}/complete", json=gen2)
    assert done.json()["status"] == "succeeded"
    stale = await client.post(url, json=gen2)  # that attempt ended otherwise: not a repeat
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "lease_lost"


async def test_a_release_with_a_delay_is_due_after_it(api: Api, clock: FakeClock) -> None:
    client, _ = api
    await client.post("/v1/jobs", json={"payload": 1, "queue": "wq"})
    lease = await _lease_one(client)
    body = {"generation": lease["generation"], "delay": 60.0}
    r = await client.post(f"/v1/leases/{lease['id']}/release", json=body)
    assert r.status_code == 200, r.text
    leased = await client.post("/v1/leases", json={"queues": ["wq"]})
    assert leased.json()["leases"] == []
    clock.advance(60)
    assert (await _lease_one(client))["id"] == lease["id"]


@pytest.mark.parametrize("delay", [-1.0, 86401.0, "5"])
async def test_a_bad_release_delay_is_refused(api: Api, delay: Any) -> None:
    client, _ = api
    await client.post("/v1/jobs", json={"payload": 1, "queue": "wq"})
    lease = await _lease_one(client)
    body = {"generation": lease["generation"], "delay": delay}
    r = await client.post(f"/v1/leases/{lease['id']}/release", json=body)
    assert r.status_code == 422, r.text
