"""PATCH /v1/schedules/{ref}: a JSON merge, one transaction, history in the detail."""

from __future__ import annotations

from typing import Any

import pytest

from jobctl.domain.clock import FakeClock

JOB = {"command": ["true"], "priority": 2, "env": {"A": "1"}}


async def _create(client: Any, **body: Any) -> Any:
    r = await client.post("/v1/schedules", json={"job": JOB, **body})
    assert r.status_code == 201, r.text
    return r.json()


async def test_patch_merges_and_recomputes_the_cursor(api: Any, clock: FakeClock) -> None:
    client, _ = api
    s = await _create(client, cron="* * * * *", tz="UTC", name="w")
    assert s["next_run_at"] == "2027-03-01T12:01:00.000Z"
    clock.advance(30)
    r = await client.patch("/v1/schedules/w", json={"cron": "*/5 * * * *", "job": {"queue": "q"}})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["cron"] == "*/5 * * * *" and out["next_run_at"] == "2027-03-01T12:05:00.000Z"
    assert out["job"]["queue"] == "q" and out["job"]["priority"] == 2  # kept
    assert out["job"]["env"] == {"A": "1"} and out["name"] == "w" and out["tz"] == "UTC"
    edit = out["edit"]
    assert set(edit["changes"]) == {"cron", "job"} and edit["by_uid"] == 0
    assert edit["changes"]["cron"] == {"from": "* * * * *", "to": "*/5 * * * *"}
    assert edit["next_before"] == "2027-03-01T12:01:00.000Z"
    detail = (await client.get("/v1/schedules/w")).json()
    assert [e["edited_at"] for e in detail["edits"]] == [edit["edited_at"]]
    assert detail["next_fires"][:2] == ["2027-03-01T12:05:00.000Z", "2027-03-01T12:10:00.000Z"]


async def test_switch_cron_to_every_and_rename(api: Any) -> None:
    client, _ = api
    await _create(client, cron="0 6 * * *", tz="UTC", name="a")
    r = await client.patch(
        "/v1/schedules/a", json={"every": 900, "at": "2027-03-01T11:50:00Z", "name": "b"}
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["cron"], out["every"], out["name"]) == (None, 900, "b")
    assert out["next_run_at"] == "2027-03-01T12:05:00.000Z"
    assert (await client.get("/v1/schedules/a")).status_code == 404
    r = await client.patch("/v1/schedules/b", json={"name": None})
    assert r.status_code == 200 and r.json()["name"] is None


async def test_rename_clash_is_409(api: Any) -> None:
    client, _ = api
    a = await _create(client, cron="0 6 * * *", name="a")
    await _create(client, cron="0 7 * * *", name="b")
    r = await client.patch(f"/v1/schedules/{a['id']}", json={"name": "b"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "conflict"
    assert "a schedule named 'b' exists" in r.json()["error"]["message"]


async def test_deleted_schedule_is_404(api: Any) -> None:
    client, _ = api
    s = await _create(client, cron="0 6 * * *")
    await client.delete(f"/v1/schedules/{s['id']}")
    r = await client.patch(f"/v1/schedules/{s['id']}", json={"cron": "0 7 * * *"})
    assert r.status_code == 404 and "deleted" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"cron": "61 * * * *"},
        {"cron": "0 6 * * *", "every": 60},
        {"every": 0.5},
        {"tz": "Mars/Olympus"},
        {"name": "sch-x"},
        {"jitter": -1.0},
        {"catch_up_limit": 0},
        {"job": {"command": []}},
        {"job": {"command": [""]}},
        {"job": {"priority": 10**9}},
        {"job": {"cwd": "relative"}},
        {"bogus": 1},
        {"cron": "0 0 30 2 *"},  # never fires
    ],
)
async def test_bad_edits_are_4xx_and_change_nothing(api: Any, body: dict[str, Any]) -> None:
    client, _ = api
    s = await _create(client, cron="0 6 * * *")
    r = await client.patch(f"/v1/schedules/{s['id']}", json=body)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert set(r.json()["error"]) >= {"code", "message"}
    after = (await client.get(f"/v1/schedules/{s['id']}")).json()
    assert after["cron"] == "0 6 * * *" and after["edits"] == []


async def test_edit_is_audited_as_schedules_update(api: Any) -> None:
    client, _ = api
    s = await _create(client, cron="0 6 * * *")
    assert (await client.patch(f"/v1/schedules/{s['id']}", json={"jitter": 5.0})).status_code == 200
    trail = (await client.get("/v1/audit", params={"action": "schedules.update"})).json()["items"]
    assert [(r["action"], r["target"]) for r in trail] == [
        ("schedules.update", f"schedule:{s['id']}")
    ]


async def test_null_keeps_and_anchor_on_a_cron_schedule_is_409(api: Any) -> None:
    client, _ = api
    s = await _create(client, cron="0 6 * * *")
    r = await client.patch(
        f"/v1/schedules/{s['id']}", json={"cron": None, "job": {"command": None, "timeout": 60.0}}
    )
    assert r.status_code == 200, r.text
    assert r.json()["cron"] == "0 6 * * *" and r.json()["job"]["command"] == ["true"]
    assert set(r.json()["edit"]["changes"]) == {"job"}
    r = await client.patch(f"/v1/schedules/{s['id']}", json={"at": "2027-03-01T11:50:00Z"})
    assert r.status_code == 409 and "anchor of an every schedule" in r.text


async def test_moving_a_template_to_a_queue_of_the_other_kind_is_409(api: Any) -> None:
    """A command template moved onto a worker queue (or a payload template onto a queue
    with command jobs) is refused; the schedule keeps its queue."""
    client, _ = api
    assert (await client.post("/v1/jobs", json={"payload": 1, "queue": "wq"})).status_code == 201
    assert (await client.post("/v1/jobs", json={"command": ["true"], "queue": "cq"})).is_success
    made = await client.post(
        "/v1/schedules", json={"cron": "0 6 * * *", "job": {"command": ["true"]}}
    )
    sid = made.json()["id"]
    r = await client.patch(f"/v1/schedules/{sid}", json={"job": {"queue": "wq"}})
    assert r.status_code == 409 and "served by workers" in r.json()["error"]["message"], r.text
    pay = await client.post(
        "/v1/schedules", json={"cron": "0 6 * * *", "job": {"payload": {"t": 1}, "queue": "wq"}}
    )
    assert pay.status_code == 201, pay.text
    r = await client.patch(f"/v1/schedules/{pay.json()['id']}", json={"job": {"queue": "cq"}})
    assert r.status_code == 409 and "queue of their own" in r.json()["error"]["message"], r.text
    assert (await client.get(f"/v1/schedules/{sid}")).json()["job"]["queue"] == "default"
