"""Keyset pages of every list route and batch schedule creation (issue 18), in-process."""

from __future__ import annotations

from typing import Any

import pytest

from jobctl.domain.models import AttemptResult
from jobctl.domain.states import Outcome
from jobctl.store.sqlite import SqliteStore

JOB = {"command": ["true"], "run_at": "2099-01-01T00:00:00Z"}
TEMPLATE = {"command": ["true"]}


async def walk(client: Any, path: str, limit: int, **params: Any) -> list[list[Any]]:
    """Every page of ``path``, as the ids of each page."""
    out, cursor = [], None
    while True:
        query = params | {"limit": limit} | ({"cursor": cursor} if cursor else {})
        r = await client.get(path, params=query)
        assert r.status_code == 200, r.text
        page = r.json()
        out.append([x.get("id", x.get("number")) for x in page["items"]])
        cursor = page["next_cursor"]
        if cursor is None:
            return out


async def test_a_job_walk_sees_each_job_once_while_jobs_are_added(api: Any) -> None:
    client, _ = api
    for _ in range(7):
        assert (await client.post("/v1/jobs", json=JOB)).status_code == 201
    first = (await client.get("/v1/jobs", params={"limit": 3})).json()
    assert len(first["items"]) == 3 and first["next_cursor"]
    await client.post("/v1/jobs", json=JOB)  # newer than the walk's start: not in it
    rest = await walk(client, "/v1/jobs", 3, cursor=first["next_cursor"])
    ids = [j["id"] for j in first["items"]] + [i for page in rest for i in page]
    assert ids == sorted(ids, reverse=True) and len(ids) == len(set(ids)) == 7
    # the last page says so: a full page of the last items has no cursor
    assert (await client.get("/v1/jobs", params={"limit": 8})).json()["next_cursor"] is None


async def test_schedule_pages_follow_creation_order(api: Any, clock: Any) -> None:
    client, _ = api
    made = []
    for i in range(5):
        r = await client.post("/v1/schedules", json={"every": 60 + i, "job": TEMPLATE})
        made.append(r.json()["id"])
        clock.advance(1)
    pages = await walk(client, "/v1/schedules", 2)
    assert pages == [made[:2], made[2:4], made[4:]]


async def test_a_cursor_is_refused_by_a_list_with_other_filters(api: Any) -> None:
    client, _ = api
    for q in ("a", "a", "b"):
        await client.post("/v1/jobs", json=JOB | {"queue": q})
    page = (await client.get("/v1/jobs", params={"limit": 1, "queue": "a"})).json()
    r = await client.get("/v1/jobs", params={"cursor": page["next_cursor"], "queue": "b"})
    assert r.status_code == 422 and "another list" in r.json()["error"]["message"]
    r = await client.get("/v1/dlq", params={"cursor": page["next_cursor"]})
    assert r.status_code == 422
    for bad in ("!!", "eyJ4IjoxfQ", "W1ssMV0"):
        r = await client.get("/v1/jobs", params={"cursor": bad})
        assert r.status_code == 422 and "invalid cursor" in r.json()["error"]["message"]


async def test_dead_jobs_and_attempts_walk_in_pages(api: Any, app_store: SqliteStore) -> None:
    client, _ = api
    ids = []
    for _ in range(5):
        r = await client.post("/v1/jobs", json={"command": ["false"], "max_attempts": 1})
        ids.append(r.json()["id"])
    for claim in app_store.claim_due("w", 10, 30):
        app_store.finish(claim.job.id, claim.generation, AttemptResult(Outcome.FAILED, 1))
    pages = await walk(client, "/v1/dlq", 2)
    assert [len(p) for p in pages] == [2, 2, 1] and sorted(i for p in pages for i in p) == ids
    for _ in range(3):  # replayed and failed again: attempts pile up
        app_store.replay([ids[0]], 1)
        [claim] = [c for c in app_store.claim_due("w", 10, 30) if c.job.id == ids[0]]
        app_store.finish(ids[0], claim.generation, AttemptResult(Outcome.FAILED, 1))
    assert await walk(client, f"/v1/jobs/{ids[0]}/attempts", 3) == [[1, 2, 3], [4]]
    assert (await client.get("/v1/jobs/999/attempts")).status_code == 404


async def test_audit_pages(api: Any) -> None:
    client, _ = api
    for _ in range(3):
        await client.post("/v1/jobs", json=JOB)
    pages = await walk(client, "/v1/audit", 2)
    ids = [i for p in pages for i in p]
    assert len(ids) >= 3 and ids == sorted(ids, reverse=True)


async def test_a_list_of_schedules_is_created_each_item_answering_alone(api: Any) -> None:
    client, _ = api
    body = [
        {"cron": "0 6 * * *", "name": "one", "job": TEMPLATE},
        {"cron": "0 6 * * *", "name": "one", "job": TEMPLATE},
        {"cron": "0 0 30 2 *", "job": TEMPLATE},
        {"every": 60, "tz": "Asia/Tokyo", "job": TEMPLATE},
    ]
    r = await client.post("/v1/schedules", json=body)
    assert r.status_code == 201, r.text
    got = r.json()
    assert [a["created"] for a in got] == [True, False, False, True]
    assert got[0]["name"] == "one" and got[3]["tz"] == "Asia/Tokyo"
    assert got[1]["error"]["code"] == "conflict"
    assert got[2]["error"]["code"] == "invalid_schedule"
    listed = (await client.get("/v1/schedules")).json()["items"]
    assert {s["id"] for s in listed} == {got[0]["id"], got[3]["id"]}
    status = (await client.get("/v1/status")).json()
    assert status["schedules"]["total"] == 2 and status["quota"]["schedules"]["used"] == 2
    again = await client.post("/v1/schedules", json=body[:2])
    assert again.status_code == 200 and [a["created"] for a in again.json()] == [False, False]


@pytest.mark.parametrize("size", [0, 1001])
async def test_a_schedule_list_is_1_to_1000_items(api: Any, size: int) -> None:
    client, _ = api
    r = await client.post("/v1/schedules", json=[{"every": 60, "job": TEMPLATE}] * size)
    assert r.status_code == 422


async def test_a_job_detail_shows_its_last_attempts_and_says_how_many_are_not_shown(
    api: Any, app_store: SqliteStore
) -> None:
    """A job failed and replayed 25 times: its detail (and the DLQ's) holds the last
    ATTEMPTS_SHOWN attempts, the total and where all of them are; the log route still
    finds an attempt that is not shown."""
    from jobctl.api.app import ATTEMPTS_SHOWN

    client, _ = api
    job_id = (await client.post("/v1/jobs", json={"command": ["false"], "max_attempts": 1})).json()[
        "id"
    ]
    total = ATTEMPTS_SHOWN + 5
    for n in range(total):
        if n:
            app_store.replay([job_id], 1)
        [claim] = [c for c in app_store.claim_due("w", 10, 30) if c.job.id == job_id]
        app_store.finish(job_id, claim.generation, AttemptResult(Outcome.FAILED, 1))
    for path in (f"/v1/jobs/{job_id}", f"/v1/dlq/{job_id}"):
        got = (await client.get(path)).json()
        assert [a["number"] for a in got["attempts"]] == list(range(6, total + 1)), path
        assert (got["attempts_total"], got["attempts_earlier"]) == (total, 5)
        assert got["attempts_url"] == f"/v1/jobs/{job_id}/attempts"
    every = await walk(client, got["attempts_url"], 10)
    assert [n for page in every for n in page] == list(range(1, total + 1))
    assert (await client.get(f"/v1/jobs/{job_id}/attempts/1/log")).status_code == 200
    missing = await client.get(f"/v1/jobs/{job_id}/attempts/{total + 1}/log")
    assert missing.status_code == 404 and f"no attempt {total + 1}" in missing.text


async def test_a_job_without_attempts_says_so(api: Any) -> None:
    client, _ = api
    job_id = (await client.post("/v1/jobs", json=JOB)).json()["id"]
    got = (await client.get(f"/v1/jobs/{job_id}")).json()
    assert (got["attempts"], got["attempts_total"], got["attempts_earlier"]) == ([], 0, 0)
