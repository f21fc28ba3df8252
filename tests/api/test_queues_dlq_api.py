"""Queue and DLQ routes in-process."""

from __future__ import annotations

import random
from typing import Any

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult
from jobctl.domain.states import Outcome


async def test_queue_settings_and_listing(api: Any) -> None:
    client, events = api
    await client.post("/v1/jobs", json=[{"command": ["true"], "queue": "mail"}] * 1)
    r = await client.patch("/v1/queues/mail", json={"concurrency": 2, "rate": 5, "burst": 10})
    assert r.status_code == 200, r.text
    assert (r.json()["concurrency"], r.json()["rate"], r.json()["burst"]) == (2, 5.0, 10)
    r = await client.patch("/v1/queues/mail", json={"weight": 3})
    assert (r.json()["concurrency"], r.json()["weight"]) == (2, 3)  # unset fields kept
    r = await client.patch("/v1/queues/mail", json={"concurrency": None})
    assert r.json()["concurrency"] is None and r.json()["rate"] == 5.0
    assert (await client.post("/v1/queues/mail/pause")).json()["paused"] is True
    queues = {q["queue"]: q for q in (await client.get("/v1/queues")).json()}
    mail = queues["mail"]
    assert (mail["waiting"], mail["due"], mail["paused"], mail["weight"]) == (1, 1, True, 3)
    assert mail["tokens"] == 10
    assert events.count("paused mail") == 1  # its jobs claimed ahead are given back
    assert (await client.post("/v1/queues/mail/resume")).json()["paused"] is False
    assert "wake" in events and events.count("paused mail") == 1
    bad = await client.patch("/v1/queues/mail", json={"concurrency": 0})
    assert bad.status_code == 422
    assert (await client.patch("/v1/queues/mail", json={"nope": 1})).status_code == 422


async def _kill_jobs(client: Any, store: Any, n: int, queue: str = "default") -> list[int]:
    body = [
        {
            "command": ["false"],
            "queue": queue,
            "max_attempts": 1,
            "key": f"{queue}-{i}-{random.random()}",
        }
        for i in range(n)
    ]
    await client.post("/v1/jobs", json=body)
    for c in store.claim_due("w", 100, 30):
        store.finish(c.job.id, c.generation, AttemptResult(Outcome.FAILED, 1, "exit code 1"))
    return [j["id"] for j in (await client.get("/v1/dlq")).json()["items"]]


async def test_dlq_list_replay_purge(api: Any, app_store: Any, clock: FakeClock) -> None:
    client, _ = api
    ids = await _kill_jobs(client, app_store, 3)
    await _kill_jobs(client, app_store, 1, queue="other")
    assert len((await client.get("/v1/dlq")).json()["items"]) == 4
    assert len((await client.get("/v1/dlq?queue=other")).json()["items"]) == 1
    assert (await client.get("/v1/dlq?reason=poison")).json()["items"] == []
    assert (await client.get("/v1/dlq?reason=bogus")).status_code == 422
    shown = (await client.get(f"/v1/dlq/{ids[0]}")).json()
    assert shown["dead_reason"] == "max_attempts" and len(shown["attempts"]) == 1
    r = await client.post("/v1/dlq/replay", json={"limit": 2, "queue": "default", "rate": 2})
    replayed = r.json()["replayed"]
    assert len(replayed) == 2 and all(j["status"] == "scheduled" for j in replayed)
    assert replayed[1]["run_at"] > replayed[0]["run_at"]
    again = await client.post("/v1/dlq/replay", json={"ids": [replayed[0]["id"]]})
    assert again.json()["replayed"] == []
    assert (await client.post("/v1/dlq/replay", json={"rate": 0})).status_code == 422
    clock.advance(1)
    purged = await client.delete("/v1/dlq?older_than=0.5")
    assert purged.json() == {"purged": 2}
    assert (await client.get("/v1/dlq")).json()["items"] == []
    assert (await client.delete("/v1/dlq")).status_code == 422
