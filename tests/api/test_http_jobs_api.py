"""Webhook jobs over the API (issue 16): a job carries either ``command`` or ``http``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

Api = tuple[httpx.AsyncClient, list[str]]
HOOK = {"method": "POST", "url": "https://hooks.example/run", "body": '{"a": 1}'}


async def test_an_http_job_is_stored_and_shown(api: Api) -> None:
    client, _ = api
    body = {"http": HOOK | {"headers": {"X-Team": "ops"}, "retry_on": [409]}, "key": "k1"}
    r = await client.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["command"] == []
    assert job["http"] == HOOK | {"headers": {"X-Team": "ops"}, "retry_on": [409]}
    again = await client.post("/v1/jobs", json=body)  # the same body: the same job
    assert again.status_code == 200 and again.json()["id"] == job["id"]
    other = await client.post("/v1/jobs", json=body | {"http": HOOK})
    assert other.status_code == 409  # the key with another request: a conflict
    shown = (await client.get(f"/v1/jobs/{job['id']}")).json()
    assert shown["http"]["url"] == "https://hooks.example/run"


async def test_an_ipv6_literal_url_is_taken(api: Api) -> None:
    client, _ = api
    url = "https://[2606:4700:4700::1111]:8443/run"
    r = await client.post("/v1/jobs", json={"http": HOOK | {"url": url}})
    assert r.status_code == 201, r.text
    assert r.json()["http"]["url"] == url


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, "either command or http"),
        ({"command": ["true"], "http": HOOK}, "either command or http"),
        ({"http": HOOK | {"url": "ftp://x/y"}}, "url"),
        ({"http": HOOK | {"url": "http://user:pw@x/"}}, "url"),
        ({"http": HOOK | {"url": "http://[fe80::1%25eth0]/"}}, "url"),
        ({"http": HOOK | {"url": "http://[1:2:3]/"}}, "url"),
        ({"http": HOOK | {"method": "TRACE"}}, "method"),
        ({"http": HOOK | {"headers": {"webhook-id": "x"}}}, "set by the daemon"),
        ({"http": HOOK | {"headers": {"X-A": "1\r\nX-B: 2"}}}, "headers"),
        ({"http": HOOK | {"headers": {"bad name": "1"}}}, "header name"),
        ({"http": HOOK | {"retry_on": [500]}}, "retry_on"),
        ({"http": HOOK | {"retry_on": [410]}}, "410"),
        ({"http": HOOK | {"secret": "no/slash"}}, "secret"),
        ({"http": HOOK, "retry_on": [1]}, "exit codes"),
        ({"http": HOOK, "env": {"A": "1"}}, "environment"),
        ({"http": HOOK | {"body": "x" * (64 * 1024 + 1)}}, "body"),
    ],
)
async def test_a_bad_http_job_is_a_422_naming_the_problem(
    api: Api, body: dict[str, Any], words: str
) -> None:
    client, _ = api
    r = await client.post("/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    assert words in r.json()["error"]["message"]


async def test_an_http_schedule_carries_its_request_to_each_occurrence(api: Api) -> None:
    client, _ = api
    r = await client.post("/v1/schedules", json={"every": 60, "job": {"http": HOOK}})
    assert r.status_code == 201, r.text
    assert r.json()["job"]["http"] == HOOK
    assert "command" not in r.json()["job"]
    fired = await client.post(f"/v1/schedules/{r.json()['id']}/trigger")
    assert fired.status_code in (200, 201), fired.text
    assert fired.json()["http"] == HOOK


async def test_a_schedule_edit_may_turn_a_command_into_a_webhook(api: Api) -> None:
    client, _ = api
    body = {"every": 60, "job": {"command": ["true"], "env": {"A": "1"}, "nice": 5}}
    made = (await client.post("/v1/schedules", json=body)).json()
    r = await client.patch(f"/v1/schedules/{made['id']}", json={"job": {"http": HOOK}})
    assert r.status_code == 200, r.text
    shown = (await client.get(f"/v1/schedules/{made['id']}")).json()["job"]
    assert shown["http"] == HOOK and "command" not in shown and shown["env"] == {}
    back = await client.patch(f"/v1/schedules/{made['id']}", json={"job": {"command": ["true"]}})
    assert back.status_code == 200, back.text
    assert "http" not in (await client.get(f"/v1/schedules/{made['id']}")).json()["job"]


async def test_command_settings_on_an_http_schedule_are_a_conflict(api: Api) -> None:
    client, _ = api
    made = (await client.post("/v1/schedules", json={"every": 60, "job": {"http": HOOK}})).json()
    r = await client.patch(f"/v1/schedules/{made['id']}", json={"job": {"nice": 5}})
    assert r.status_code == 409 and "http request" in r.json()["error"]["message"]
