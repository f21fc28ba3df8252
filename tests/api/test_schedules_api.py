"""Schedule routes in-process: validation, shapes, actions."""

from __future__ import annotations

from typing import Any

import pytest

JOB = {"command": ["true"]}


async def _create(client: Any, **body: Any) -> Any:
    return await client.post("/v1/schedules", json={"job": JOB, **body})


async def test_create_show_and_act(api: Any) -> None:
    client, _ = api
    r = await _create(client, cron="0 6 * * *", tz="Asia/Tokyo", name="report")
    assert r.status_code == 201, r.text
    s = r.json()
    assert (s["name"], s["tz"], s["misfire"], s["overlap"], s["paused"]) == (
        "report",
        "Asia/Tokyo",
        "once",
        "skip",
        False,
    )
    assert (
        s["next_run_at"] == "2027-03-01T21:00:00.000Z" and s["description"] == "at 06:00 every day"
    )
    detail = (await client.get("/v1/schedules/report")).json()
    assert detail["next_fires"][:2] == ["2027-03-01T21:00:00.000Z", "2027-03-02T21:00:00.000Z"]
    assert detail["occurrences"] == [] and detail["last_run"] is None
    job = (await client.post("/v1/schedules/report/trigger")).json()
    assert job["key"].startswith(f"{s['id']}@manual-") and job["schedule_id"] == s["id"]
    paused = (await client.post(f"/v1/schedules/{s['id']}/pause")).json()
    assert paused["paused"] is True
    resumed = (await client.post("/v1/schedules/report/resume")).json()
    assert resumed["paused"] is False and resumed["skipped_while_paused"] == 0
    listed = (await client.get("/v1/schedules")).json()["items"]
    assert [x["id"] for x in listed] == [s["id"]]
    status = (await client.get("/v1/status")).json()
    assert status["schedules"]["total"] == 1
    deleted = (await client.delete("/v1/schedules/report")).json()
    assert deleted["deleted"] is True
    assert (await client.get("/v1/schedules/report")).status_code == 404
    assert (await client.get(f"/v1/schedules/{s['id']}")).json()["deleted"] is True


async def test_interval_schedule_is_anchored(api: Any) -> None:
    client, _ = api
    r = await _create(client, every=900, at="2027-03-01T11:50:00Z", tz="UTC")
    assert r.status_code == 201, r.text
    assert r.json()["next_run_at"] == "2027-03-01T12:05:00.000Z"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"cron": "61 * * * *"}, "minute field: 61 is out of range 0-59"),
        ({"cron": "0 6 * * *", "tz": "Asia/Tokio"}, "Asia/Tokyo"),
        ({"cron": "0 0 30 2 *"}, "never"),
        ({"cron": "* * * *"}, "expected 5 fields"),
        ({}, "exactly one of cron or every"),
        ({"cron": "@hourly", "every": 60}, "exactly one"),
        ({"every": 0.5}, "every"),
        ({"cron": "@hourly", "misfire": "sometimes"}, "misfire"),
        ({"cron": "@hourly", "name": "sch-taken"}, "invalid schedule name"),
        ({"cron": "@hourly", "bogus": 1}, "bogus"),
    ],
)
async def test_bad_schedules_are_422(api: Any, body: dict[str, Any], fragment: str) -> None:
    client, _ = api
    r = await _create(client, **body)
    assert r.status_code == 422, r.text
    assert fragment in r.json()["error"]["message"]


async def test_duplicate_name_is_409(api: Any) -> None:
    client, _ = api
    assert (await _create(client, cron="@daily", name="x")).status_code == 201
    r = await _create(client, cron="@hourly", name="x")
    assert r.status_code == 409 and "named 'x'" in r.json()["error"]["message"]


async def test_list_is_paged_with_limit_and_after(api: Any) -> None:
    client, _ = api
    ids = [(await _create(client, cron="@daily", name=f"s{n}")).json()["id"] for n in range(5)]
    first = (await client.get("/v1/schedules", params={"limit": 2})).json()["items"]
    rest = (await client.get("/v1/schedules", params={"after": first[-1]["id"]})).json()["items"]
    assert sorted(s["id"] for s in first + rest) == sorted(ids) and len(first) == 2
    bad = await client.get("/v1/schedules", params={"limit": 0})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_input"


async def test_a_deleted_schedules_name_is_free_again(api: Any) -> None:
    client, _ = api
    old = (await _create(client, cron="0 6 * * *", name="w")).json()
    assert (await client.delete("/v1/schedules/w")).status_code == 200
    r = await _create(client, cron="0 7 * * *", name="w")
    assert r.status_code == 201, r.text  # was 500: UNIQUE constraint on schedule_defs.name
    assert (await client.get("/v1/schedules/w")).json()["id"] == r.json()["id"]
    gone = (await client.get(f"/v1/schedules/{old['id']}")).json()
    assert (gone["name"], gone["deleted"]) == ("w", True)
    taken = await _create(client, cron="0 8 * * *", name="w")
    assert taken.status_code == 409 and taken.json()["error"]["code"]
