"""Issue 11: every field is checked at the API with the limits the store and the executor
apply (jobctl.domain.limits), so bad input is a 422 naming the field, never a 500 and
never a row that breaks something later. Both enqueue paths (the fast one and FastAPI's
routes) and every kind of parameter: bodies, paths, queries."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from jobctl.domain import limits

BIG_ID = "99999999999999999999"  # above 2^63-1
GOOD: dict[str, Any] = {"command": ["true"]}
GOOD_SCHEDULE: dict[str, Any] = {"every": 60, "job": GOOD}


def _assert_422(r: httpx.Response, field: str) -> None:
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert err["code"] in ("invalid_input", "invalid_schedule")
    assert field in err["message"], err["message"]


JOB_CASES = [
    ({"timeout": 1e-9}, "timeout"),  # under the store's ms resolution: a CHECK error before
    ({"timeout": 0.0004}, "timeout"),
    ({"timeout": 86400 * 366}, "timeout"),
    ({"command": ["ec\u0000ho"]}, "command"),
    ({"command": ["echo", "x\u0000"]}, "command"),
    ({"command": [""]}, "command"),
    ({"cwd": "/tmp\u0000"}, "cwd"),
    ({"cwd": "relative"}, "cwd"),
    ({"env": {"A\u0000": "x"}}, "env"),
    ({"env": {"A": "x\u0000"}}, "env"),
    ({"env": {"A=B": "x"}}, "env"),
    ({"env": {"JOBCTL_JOB_ID": "1"}}, "env"),
    ({"key": "k\u0000"}, "key"),
    ({"queue": "q\u0000"}, "queue"),
    ({"queue": "q" * 101}, "queue"),
    ({"priority": 10**20}, "priority"),
    ({"max_attempts": 2**70}, "max_attempts"),
    ({"backoff": {"base": 1e300}}, "backoff"),
    ({"retry_on": [256]}, "retry_on"),
    ({"run_at": "0001-01-01T00:00:00+05:00"}, "run_at"),
    ({"run_at": "9999-12-31T23:00:00-05:00"}, "run_at"),
    ({"run_at": "1969-12-31T23:59:59Z"}, "run_at"),
]


@pytest.mark.parametrize(("extra", "field"), JOB_CASES)
async def test_bad_job_fields_are_422_on_the_fast_path(
    api: Any, extra: dict[str, Any], field: str
) -> None:
    client, _ = api
    _assert_422(await client.post("/v1/jobs", json={**GOOD, **extra}), field)
    _assert_422(await client.post("/v1/jobs", json=[GOOD, {**GOOD, **extra}]), field)
    assert (await client.get("/v1/jobs")).json()["items"] == []  # nothing of either request stayed


@pytest.mark.parametrize(("extra", "field"), JOB_CASES)
async def test_bad_template_fields_are_422_on_schedules(
    api: Any, extra: dict[str, Any], field: str
) -> None:
    client, _ = api
    if field == "run_at":
        extra, field = {"at": extra["run_at"]}, "at"
        body = {**GOOD_SCHEDULE, **extra}
    else:
        body = {**GOOD_SCHEDULE, "job": {**GOOD, **extra}}
    _assert_422(await client.post("/v1/schedules", json=body), field)
    assert (await client.get("/v1/schedules")).json()["items"] == []


@pytest.mark.parametrize(
    "raw",
    [
        b'{"command": ["true"], "timeout": NaN}',
        b'{"command": ["true"], "timeout": Infinity}',
        b'{"command": ["true"], "timeout": 1e400}',
        b'{"command": ["\\ud800"]}',  # a lone surrogate: not UTF-8, the store cannot keep it
    ],
)
async def test_non_finite_numbers_and_surrogates_are_422(api: Any, raw: bytes) -> None:
    client, _ = api
    headers = {"content-type": "application/json"}
    r = await client.post("/v1/jobs", content=raw, headers=headers)
    assert r.status_code == 422, r.text
    sched = raw.replace(b'{"command"', b'{"every": 60, "job": {"command"', 1) + b"}"
    r = await client.post("/v1/schedules", content=sched, headers=headers)
    assert r.status_code == 422, r.text


async def test_a_schedule_command_over_64_kib_is_422(api: Any) -> None:
    client, _ = api
    job = {"command": ["echo", "x" * limits.MAX_PAYLOAD_BYTES]}
    _assert_422(await client.post("/v1/schedules", json={**GOOD_SCHEDULE, "job": job}), "byte")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "a\u0000b"}, "name"),
        ({"name": "sch-mine"}, "name"),
        ({"every": 1e300}, "every"),
        ({"every": 0.5}, "every"),
        ({"jitter": -1}, "jitter"),
        ({"catch_up_limit": 2**64}, "catch_up_limit"),
        ({"every": None, "cron": "* * *\u0000 * *"}, "cron"),
        ({"tz": "UTC\u0000"}, "tz"),
    ],
)
async def test_bad_schedule_fields_are_422(api: Any, body: dict[str, Any], field: str) -> None:
    client, _ = api
    _assert_422(await client.post("/v1/schedules", json={**GOOD_SCHEDULE, **body}), field)


@pytest.mark.parametrize(
    ("method", "url", "field"),
    [
        ("GET", f"/v1/jobs/{BIG_ID}", "job_id"),
        ("POST", f"/v1/jobs/{BIG_ID}/cancel", "job_id"),
        ("GET", f"/v1/jobs/1/attempts/{BIG_ID}/log", "number"),
        ("GET", f"/v1/jobs?before={BIG_ID}", "before"),
        ("GET", f"/v1/dlq/{BIG_ID}", "job_id"),
        ("DELETE", "/v1/dlq?older_than=1e300", "older_than"),
        ("DELETE", "/v1/dlq?older_than=inf", "older_than"),
        ("DELETE", "/v1/dlq?older_than=nan", "older_than"),
        ("GET", "/v1/dlq?since=0001-01-01T00:00:00%2B05:00", "since"),
        ("GET", "/v1/schedules/x?history=100000000000000000000", "history"),
        ("POST", f"/v1/queues/{'q' * 101}/pause", "name"),
    ],
)
async def test_out_of_range_paths_and_queries_are_422(
    api: Any, method: str, url: str, field: str
) -> None:
    client, _ = api
    _assert_422(await client.request(method, url), field)


@pytest.mark.parametrize(
    ("method", "url", "body", "field"),
    [
        ("PATCH", "/v1/queues/q", {"rate": 1e-300}, "rate"),
        ("PATCH", "/v1/queues/q", {"rate": 1e300}, "rate"),
        ("POST", "/v1/dlq/replay", {"rate": 1e-300}, "rate"),
        ("POST", "/v1/dlq/replay", {"ids": [int(BIG_ID)]}, "ids"),
        ("POST", "/v1/dlq/replay", {"queue": "q\u0000"}, "queue"),
    ],
)
async def test_out_of_range_bodies_are_422(
    api: Any, method: str, url: str, body: dict[str, Any], field: str
) -> None:
    client, _ = api
    _assert_422(await client.request(method, url, json=body), field)


async def test_the_limits_themselves_are_accepted(api: Any) -> None:
    client, _ = api
    job = {
        "command": ["echo", "ünïcödé"],
        "timeout": limits.MIN_TIMEOUT,
        "priority": limits.MAX_PRIORITY,
        "max_attempts": limits.MAX_ATTEMPTS,
        "queue": "q" * limits.MAX_QUEUE_NAME,
        "key": "k" * limits.MAX_KEY,
        "run_at": "8999-12-31T23:59:59Z",
    }
    r = await client.post("/v1/jobs", json=job)
    assert r.status_code == 201, r.text
    assert r.json()["timeout"] == limits.MIN_TIMEOUT
    template = {k: v for k, v in job.items() if k not in ("run_at", "key")}
    sched = {"every": limits.MIN_EVERY, "job": template}
    assert (await client.post("/v1/schedules", json=sched)).status_code == 201
    r = await client.patch("/v1/queues/q", json={"rate": limits.MIN_RATE})
    assert r.status_code == 200 and r.json()["rate"] == limits.MIN_RATE
    r = await client.delete(f"/v1/dlq?older_than={limits.MAX_AGE}")
    assert r.status_code == 200 and r.json() == {"purged": 0}
    r = await client.get(f"/v1/jobs/{limits.MAX_ID}")
    assert r.status_code == 404


def test_the_limits_table_is_json_serializable() -> None:
    json.dumps([(lim.field, lim.rule) for lim in limits.LIMITS])


@pytest.mark.parametrize(
    ("method", "url", "allow"),
    [
        ("PUT", "/v1/jobs", {"GET", "POST"}),
        ("DELETE", "/v1/jobs/1", {"GET"}),
        ("GET", "/v1/jobs/1/cancel", {"POST"}),
        ("PUT", "/v1/prune", {"POST"}),
    ],
)
async def test_405_answers_say_what_is_allowed(
    api: Any, method: str, url: str, allow: set[str]
) -> None:
    client, _ = api
    r = await client.request(method, url)
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert {m.strip() for m in r.headers["allow"].split(",")} == allow


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("POST", "/v1/jobs", GOOD),  # the fast path
        ("POST", "/v1/jobs/", GOOD),
        ("POST", "/v1/schedules", GOOD_SCHEDULE),
        ("PATCH", "/v1/queues/q", {"rate": 1}),
        ("POST", "/v1/dlq/replay", {}),
        ("POST", "/v1/prune", {"dry_run": True}),
    ],
)
@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_json_routes_refuse_other_content_types_with_415(
    api: Any, method: str, url: str, body: Any, ctype: str | None
) -> None:
    client, _ = api
    headers = {} if ctype is None else {"content-type": ctype}
    r = await client.request(method, url, content=json.dumps(body), headers=headers)
    assert r.status_code == 415, r.text
    assert r.json()["error"]["code"] == "unsupported_media_type"
    ok = await client.request(
        method, url, content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert ok.status_code < 300, ok.text
    charset = {"content-type": "application/json; charset=utf-8"}
    assert (await client.request(method, url, content=json.dumps(body), headers=charset)).is_success


async def test_routes_without_a_body_ignore_the_content_type(api: Any) -> None:
    client, _ = api
    r = await client.post("/v1/queues/q/pause", headers={"content-type": "text/plain"})
    assert r.status_code == 200
