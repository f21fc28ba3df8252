"""The HTTP API in-process (httpx's ASGI transport): status codes, bodies, errors."""

from __future__ import annotations

from typing import Any

import httpx
import pytest


async def _post(client: httpx.AsyncClient, body: Any) -> httpx.Response:
    return await client.post("/v1/jobs", json=body)


async def test_enqueue_is_201_then_200_for_the_same_key(api: Any) -> None:
    client, events = api
    r1 = await _post(client, {"command": ["echo", "hi"], "key": "k1"})
    assert r1.status_code == 201, r1.text
    job = r1.json()
    assert job["status"] == "scheduled" and job["run_at"].endswith("Z")
    assert job["command"] == ["echo", "hi"] and job["attempt"] == 0
    r2 = await _post(client, {"command": ["echo", "hi"], "key": "k1"})
    assert r2.status_code == 200 and r2.json()["id"] == job["id"]
    assert events == ["wake"]
    r3 = await _post(client, {"command": ["echo", "bye"], "key": "k1"})
    assert r3.status_code == 409 and r3.json()["error"]["code"] == "key_conflict"


async def test_the_enqueue_answer_is_the_job_as_stored_in_utf8(api: Any) -> None:
    client, _ = api
    body = {
        "command": ["echo", "grüße ☃"],
        "env": {"NAME": "zoë"},
        "timeout": 1.5,
        "run_at": "2027-03-14T15:00:00.123456+09:00",
    }
    r = await _post(client, body)
    assert r.status_code == 201
    assert r.headers["content-type"] == "application/json"
    assert "grüße ☃".encode() in r.content and b"\\u" not in r.content  # UTF-8, unescaped
    job = r.json()
    assert job["run_at"] == "2027-03-14T06:00:00.123Z" and job["timeout"] == 1.5
    stored = (await client.get(f"/v1/jobs/{job['id']}")).json()
    assert {k: stored[k] for k in job} == job


async def test_batch_enqueue_is_atomic(api: Any) -> None:
    client, _ = api
    r = await _post(client, [{"command": ["true"], "key": f"b{i}"} for i in range(3)])
    assert r.status_code == 201 and [j["created"] for j in r.json()] == [True] * 3
    r = await _post(
        client, [{"command": ["true"], "key": "new"}, {"command": ["false"], "key": "b0"}]
    )
    assert r.status_code == 409
    assert len((await client.get("/v1/jobs")).json()["items"]) == 3


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"command": []}, "command"),
        ({"command": ["x"], "bogus": 1}, "bogus"),
        ({"command": ["x"], "run_at": "tomorrow"}, "run_at"),
        ({"command": ["x"], "run_at": "2027-01-01T00:00:00"}, "offset"),
        ({"command": ["x"], "max_attempts": 0}, "max_attempts"),
        ({"command": ["x"], "timeout": -1}, "timeout"),
        ({"command": ["x"], "cwd": "relative"}, "absolute"),
        ({"command": ["x"], "env": {"JOBCTL_JOB_ID": "1"}}, "environment"),
        ({"command": ["x" * 70_000]}, "65536-byte limit"),
        ({"command": ["x"], "env": {"BIG": "y" * 70_000}}, "limit"),
        ([], "batch"),
        ("not an object", "job object"),
        ([{"command": ["x"]}, {"command": []}], "1.command"),
        ({"command": []}, "command: at least 1 item (got 0)"),
        ({"command": ["x"], "priority": 5000}, "priority: must be at most 1000 (got 5000)"),
        ({"command": ["x"], "key": "k" * 600}, "key: at most 512 characters (got 600)"),
        ({"command": ["x"], "queue": ""}, "queue: must not be empty"),
        ({"command": ["x"], "max_attempts": "many"}, "max_attempts: must be a number"),
    ],
)
async def test_bad_input_is_422_with_a_json_error(api: Any, body: Any, fragment: str) -> None:
    client, _ = api
    r = await _post(client, body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_input" and fragment in err["message"]


async def test_malformed_json_is_4xx(api: Any) -> None:
    client, _ = api
    r = await client.post(
        "/v1/jobs", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert 400 <= r.status_code < 500 and "error" in r.json()


async def test_get_list_cancel_and_not_found(api: Any) -> None:
    client, _ = api
    job = (await _post(client, {"command": ["true"], "queue": "q1"})).json()
    await _post(client, {"command": ["true"], "queue": "q2"})
    got = (await client.get(f"/v1/jobs/{job['id']}")).json()
    assert got["attempts"] == [] and got["queue"] == "q1"
    assert [j["queue"] for j in (await client.get("/v1/jobs?queue=q2")).json()["items"]] == ["q2"]
    assert len((await client.get("/v1/jobs?status=scheduled&limit=1")).json()["items"]) == 1
    assert (await client.get("/v1/jobs?status=weird")).status_code == 422
    r = await client.post(f"/v1/jobs/{job['id']}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert r.json()["already_cancelled"] is False
    again = await client.post(f"/v1/jobs/{job['id']}/cancel")
    assert again.status_code == 200 and again.json() == r.json() | {"already_cancelled": True}
    missing = await client.get("/v1/jobs/999")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert (await client.get("/v1/nowhere")).status_code == 404
    assert (await client.get("/v1/jobs/999/attempts/1/log")).status_code == 404


async def test_status_and_dlq_shapes(api: Any) -> None:
    client, _ = api
    await _post(client, {"command": ["true"]})
    s = (await client.get("/v1/status")).json()
    assert s["counts"]["scheduled"] == 1 and s["version"]
    [q] = s["queues"]
    assert q["queue"] == "default" and q["due"] == 1 and q["oldest_due_age"] == 0
    assert (await client.get("/v1/dlq")).json()["items"] == []
    r = await client.post("/v1/dlq/replay", json={"limit": 10})
    assert r.json() == {"replayed": []}
    assert (await client.post("/v1/dlq/replay", json={"limit": 0})).status_code == 422


async def test_openapi_document_is_served(api: Any) -> None:
    client, _ = api
    doc = (await client.get("/v1/openapi.json")).json()
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/status", "/v1/dlq/replay"} <= set(doc["paths"])


async def test_a_repeated_cancel_is_answered_from_the_read_without_a_write(
    api: Any, app_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``jobctl cancel`` of a cancelled job read it (GET); the cancel that replaced the
    read must not cost a write transaction (nor wake the engine) for nothing."""
    client, events = api
    job = (await _post(client, {"command": ["true"], "queue": "q1"})).json()
    first = (await client.post(f"/v1/jobs/{job['id']}/cancel")).json()
    writes: list[int] = []
    real = app_store.cancel

    def cancel(job_id: int, reason: str) -> Any:
        writes.append(job_id)
        return real(job_id, reason)

    monkeypatch.setattr(app_store, "cancel", cancel)
    events.clear()
    again = await client.post(f"/v1/jobs/{job['id']}/cancel")
    assert again.status_code == 200 and again.json() == first | {"already_cancelled": True}
    assert (writes, events) == ([], [])


async def test_daemon_retry_defaults_fill_what_a_job_leaves_out(app_store: Any) -> None:
    from jobctl.api.app import Hooks, create_app
    from jobctl.domain.models import Backoff
    from jobctl.domain.retry import RetryDefaults
    from jobctl.store.aio import AsyncStore

    astore = AsyncStore(app_store, threads=2)
    app = create_app(astore, Hooks(retry=RetryDefaults(7, Backoff(2, 20))))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://jobctl"
    ) as client:
        plain = (await _post(client, {"command": ["true"]})).json()
        own = (
            await _post(
                client, {"command": ["true"], "max_attempts": 2, "backoff": {"base": 1, "cap": 1}}
            )
        ).json()
        sched = (
            await client.post(
                "/v1/schedules", json={"cron": "@daily", "job": {"command": ["true"]}}
            )
        ).json()
    astore.close()
    assert (plain["max_attempts"], plain["backoff"]) == (7, {"base": 2.0, "cap": 20.0})
    assert (own["max_attempts"], own["backoff"]) == (2, {"base": 1.0, "cap": 1.0})
    assert sched["job"]["max_attempts"] == 7
