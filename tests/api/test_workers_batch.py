"""Outcomes batched into a lease request (``finish``, api/leasebatch.py, docs/workers.md):
each item is fenced by its own generation and answered on its own (a stale one is that
item's ``lease_lost``, a missing job that item's ``not_found``, a repeat of the recorded
outcome that item's ``repeated``), none sinks its neighbours, and the same request leases
more once the outcomes are recorded."""

from __future__ import annotations

from typing import Any

import httpx

Api = tuple[httpx.AsyncClient, list[str]]


async def _leased(client: httpx.AsyncClient, n: int, **extra: Any) -> list[dict[str, Any]]:
    for i in range(n):
        r = await client.post("/v1/jobs", json={"payload": i, "queue": "wq"} | extra)
        assert r.status_code == 201, r.text
    r = await client.post("/v1/leases", json={"queues": ["wq"], "max": n})
    leases: list[dict[str, Any]] = r.json()["leases"]
    assert len(leases) == n
    return leases


def _item(lease: dict[str, Any], outcome: str = "complete", **extra: Any) -> dict[str, Any]:
    return {"id": lease["id"], "generation": lease["generation"], "outcome": outcome} | extra


async def test_each_outcome_is_fenced_and_answered_on_its_own(api: Api) -> None:
    client, _ = api
    a, b, c = await _leased(client, 3, max_attempts=3)
    await client.post("/v1/jobs", json={"payload": "next", "queue": "wq"})
    finish = [
        _item(a, result={"ok": 1}),
        _item(b, "fail", error="Traceback: boom", retryable=False),
        _item(c) | {"generation": c["generation"] + 1},  # stale
        {"id": 999_999, "generation": 1, "outcome": "complete"},  # no such job
    ]
    r = await client.post("/v1/leases", json={"queues": ["wq"], "max": 5, "finish": finish})
    assert r.status_code == 200, r.text
    answers = r.json()["finished"]
    assert [x["id"] for x in answers] == [a["id"], b["id"], c["id"], 999_999]
    assert answers[0] == {"id": a["id"], "generation": 1, "status": "succeeded",
                               "repeated": False}  # fmt: skip
    assert answers[1]["status"] == "dead"
    assert answers[2]["error"]["code"] == "lease_lost" and "status" not in answers[2]
    assert answers[3]["error"]["code"] == "not_found"
    assert [x["payload"] for x in r.json()["leases"]] == ["next"]  # leased after the finish
    jobs = {j: (await client.get(f"/v1/jobs/{j}")).json() for j in (a["id"], b["id"], c["id"])}
    assert jobs[a["id"]]["attempts"][0]["output_tail"] == '{"ok":1}'
    assert jobs[b["id"]]["dead_reason"] == "non_retryable"
    assert "boom" in jobs[b["id"]]["last_error"]
    assert jobs[c["id"]]["status"] == "running"  # the stale item changed nothing
    metrics = (await client.get("/v1/metrics")).text
    assert 'jobctl_attempts_finished_total{outcome="succeeded",queue="wq"} 1.0' in metrics
    assert 'jobctl_dead_jobs_total{queue="wq",reason="non_retryable"} 1.0' in metrics


async def test_a_repeat_is_repeated_and_another_outcome_is_lease_lost(api: Api) -> None:
    client, _ = api
    [a] = await _leased(client, 1)
    body = {"queues": ["wq"], "max": 0, "finish": [_item(a, result=7)]}
    first = (await client.post("/v1/leases", json=body)).json()
    assert first["leases"] == [] and first["finished"][0]["repeated"] is False
    again = (await client.post("/v1/leases", json=body)).json()["finished"][0]
    assert again["repeated"] is True and again["status"] == "succeeded"
    other = body | {"finish": [_item(a, "fail", error="x")]}
    lost = (await client.post("/v1/leases", json=other)).json()["finished"][0]
    assert lost["error"]["code"] == "lease_lost"
    attempts = (await client.get(f"/v1/jobs/{a['id']}")).json()["attempts"]
    assert [x["outcome"] for x in attempts] == ["succeeded"]


async def test_a_retryable_failure_is_scheduled_and_wakes_the_timer(api: Api) -> None:
    client, events = api
    [a] = await _leased(client, 1, max_attempts=2)
    events.clear()
    body = {"queues": ["wq"], "max": 0, "finish": [_item(a, "fail", error="later")]}
    [answer] = (await client.post("/v1/leases", json=body)).json()["finished"]
    assert answer["status"] == "scheduled" and "wake" in events


async def test_a_bad_finish_list_is_a_422(api: Api) -> None:
    client, _ = api
    [a] = await _leased(client, 1)
    for finish in (
        [_item(a, "done")],
        [_item(a) | {"generation": 0}],
        [_item(a)] * 101,
    ):
        r = await client.post("/v1/leases", json={"queues": ["wq"], "finish": finish})
        assert r.status_code == 422, r.text
    assert (await client.get(f"/v1/jobs/{a['id']}")).json()["status"] == "running"
    r = await client.post("/v1/leases", json={"queues": ["wq"], "max": 0})
    assert r.status_code == 200 and r.json() == {"leases": []}
