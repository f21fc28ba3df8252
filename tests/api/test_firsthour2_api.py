"""Queue names and keys a new job may have (branch firsthour2); queues stored before the
rule stay listable and usable."""

from __future__ import annotations

from typing import Any

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobSpec, JobTemplate
from jobctl.domain.schedule import Policy, ScheduleSpec, Timing
from jobctl.store.sqlite import SqliteStore

BAD_QUEUES = ["a b", "tab\there", "new\nline", "bell\x07", "\x85nel", " lead", "nbsp\xa0x"]


@pytest.mark.parametrize("queue", BAD_QUEUES)
async def test_a_queue_name_with_space_or_control_is_422(api: Any, queue: str) -> None:
    client, _ = api
    r = await client.post("/v1/jobs", json={"command": ["true"], "queue": queue})
    assert r.status_code == 422  # was 201
    err = r.json()["error"]
    assert err["code"] == "invalid_input"
    assert err["message"] == "queue: must be a name without spaces or control characters"
    r = await client.post("/v1/schedules", json={"cron": "0 6 * * *", "job": {
        "command": ["true"], "queue": queue}})  # fmt: skip
    assert r.status_code == 422 and "job.queue: must be a name without" in r.text


@pytest.mark.parametrize("queue", ["default", "mail.out", "büro-2", "a/b:c@d", "x" * 100])
async def test_ordinary_queue_names_are_taken(api: Any, queue: str) -> None:
    client, _ = api
    r = await client.post("/v1/jobs", json={"command": ["true"], "queue": queue})
    assert r.status_code == 201, r.text


async def test_an_empty_key_is_422(api: Any) -> None:
    client, _ = api
    r = await client.post("/v1/jobs", json={"command": ["true"], "key": ""})
    assert r.status_code == 422 and r.json()["error"]["message"].startswith("key: ")


async def test_a_stored_queue_the_rule_refuses_stays_usable(
    api: Any, app_store: SqliteStore, clock: FakeClock
) -> None:
    client, _ = api
    app_store.insert([JobSpec(("true",), clock.now(), 0, queue="old name")])
    template = JobTemplate(("true",), queue="old name")
    spec = ScheduleSpec(Timing("UTC", cron="0 6 * * *"), Policy(), template, 0, "legacy")
    app_store.create_schedule(spec)
    names = [q["queue"] for q in (await client.get("/v1/queues")).json()]
    assert "old name" in names
    for action in ("pause", "resume"):
        r = await client.post(f"/v1/queues/{'old name'}/{action}")
        assert r.status_code == 200, r.text
    r = await client.patch("/v1/queues/old name", json={"concurrency": 2})
    assert r.status_code == 200, r.text
    assert (await client.get("/v1/jobs", params={"queue": "old name"})).json()["items"]
    r = await client.patch("/v1/schedules/legacy", json={"job": {"priority": 3}})
    assert r.status_code == 200, r.text  # an edit that keeps the old queue name
    assert r.json()["job"]["queue"] == "old name" and r.json()["job"]["priority"] == 3
    r = await client.patch("/v1/schedules/legacy", json={"job": {"queue": "new name"}})
    assert r.status_code == 422  # but no new name of that kind


async def test_rerun_copies_a_finished_jobs_definition(api: Any, clock: FakeClock) -> None:
    client, _ = api
    body = {"command": ["echo", "hi"], "queue": "q", "priority": 7, "key": "k1",
            "env": {"A": "1"}, "max_attempts": 2, "timeout": 30.0}  # fmt: skip
    old = (await client.post("/v1/jobs", json=body)).json()
    r = await client.post(f"/v1/jobs/{old['id']}/rerun", json={})
    assert r.status_code == 409 and "rerun takes a finished job" in r.text  # still scheduled
    await client.post(f"/v1/jobs/{old['id']}/cancel")
    r = await client.post(f"/v1/jobs/{old['id']}/rerun", json={})
    assert r.status_code == 201, r.text
    new = r.json()
    assert new["id"] != old["id"] and new["key"] != "k1" and new["status"] == "scheduled"
    same = ("command", "queue", "priority", "env", "max_attempts", "timeout", "owner_uid")
    assert {k: new[k] for k in same} == {k: old[k] for k in same}
    assert new["run_at"] == old["run_at"]  # now, on the fake clock that did not move
    later = "2027-03-02T09:00:00Z"
    r = await client.post(f"/v1/jobs/{old['id']}/rerun", json={"run_at": later})
    assert r.status_code == 201 and r.json()["run_at"] == "2027-03-02T09:00:00.000Z"
    r = await client.post(f"/v1/jobs/{old['id']}/rerun", json={"run_at": "2027-03-02 09:00"})
    assert r.status_code == 422
    assert (await client.post("/v1/jobs/999999/rerun", json={})).status_code == 404
