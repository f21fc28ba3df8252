"""The audit trail, request ids and the one-line 500, through the whole ASGI app."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from jobctl.api.app import Hooks, create_app
from jobctl.domain.clock import FakeClock
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore

JOB = {"command": ["true"]}
OTHER = 60_001  # a uid that is neither root nor the daemon's


def peer(app: Any, uid: int, gid: int = 100, pid: int = 4242, **extra: Any) -> Any:
    """The app as seen from a connection whose SO_PEERCRED gave ``uid``/``gid``/``pid``
    (what :class:`jobctl.api.server.PeerCredProtocol` puts in each request's state)."""

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope["state"] = {"peer_uid": uid, "peer_gid": gid, "peer_pid": pid, **extra}
        await app(scope, receive, send)

    return asgi


@pytest.fixture
async def app(app_store: SqliteStore) -> AsyncIterator[Any]:
    astore = AsyncStore(app_store, threads=4)
    yield create_app(astore, Hooks())
    astore.close()


def client(asgi: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://jobctl")


def rows(store: SqliteStore, **filters: Any) -> list[Any]:
    store.flush_audit()
    return store.list_audit(**filters)


async def test_every_kind_of_write_is_recorded(app: Any, app_store: SqliteStore) -> None:
    me = os.geteuid()
    async with client(peer(app, me, 55, 777)) as c:
        one = (await c.post("/v1/jobs", json=JOB)).json()
        batch = (await c.post("/v1/jobs", json=[JOB, JOB, JOB])).json()
        await c.post(f"/v1/jobs/{one['id']}/cancel")
        await c.post("/v1/jobs/999/cancel")  # refused: recorded with its error code
        sched = {"cron": "0 6 * * *", "tz": "UTC", "name": "nightly", "job": JOB}
        created = await c.post("/v1/schedules", json=sched)
        assert created.status_code == 201
        two = [{"cron": "0 7 * * *", "job": JOB}, sched | {"cron": "0 8 * * *"}]  # 2nd: taken
        assert (await c.post("/v1/schedules", json=two)).status_code == 201
        for verb in ("pause", "resume", "trigger"):
            await c.post(f"/v1/schedules/nightly/{verb}")
        await c.delete("/v1/schedules/nightly")
        await c.patch("/v1/queues/mail", json={"concurrency": 2})
        await c.post("/v1/queues/mail/pause")
        await c.post("/v1/queues/mail/resume")
        await c.post("/v1/dlq/replay", json={"limit": 5})
        await c.delete("/v1/dlq", params={"older_than": 86400})
        await c.post("/v1/prune", json={"dry_run": True})
        await c.get("/v1/jobs")  # a read: not recorded
        await c.get("/v1/status")
    got = [(r.action, r.target, r.status, r.error) for r in reversed(rows(app_store))]
    sid = created.json()["id"]
    first = batch[0]["id"]
    assert got == [
        ("jobs.enqueue", f"job:{one['id']}", 201, None),
        ("jobs.enqueue", f"jobs:{first}..{first + 2} n=3", 201, None),
        ("jobs.cancel", f"job:{one['id']}", 200, None),
        ("jobs.cancel", "job:999", 404, "not_found"),
        ("schedules.create", f"schedule:{sid}", 201, None),
        ("schedules.create", "schedules:n=1", 201, None),  # a list: how many it created
        ("schedules.pause", "schedule:nightly", 200, None),
        ("schedules.resume", "schedule:nightly", 200, None),
        ("schedules.trigger", "schedule:nightly", 201, None),
        ("schedules.delete", "schedule:nightly", 200, None),
        ("queues.set", "queue:mail", 200, None),
        ("queues.pause", "queue:mail", 200, None),
        ("queues.resume", "queue:mail", 200, None),
        ("dlq.replay", "", 200, None),
        ("dlq.purge", "older_than=86400", 200, None),
        ("jobs.prune", "", 200, None),
    ]
    r = rows(app_store)[0]
    assert (r.uid, r.gid, r.pid, r.denied) == (me, 55, 777, False)
    assert len({x.request_id for x in rows(app_store)}) == len(got)


async def test_bad_enqueue_is_recorded_with_its_error(app: Any, app_store: SqliteStore) -> None:
    async with client(app) as c:
        assert (await c.post("/v1/jobs", json={"command": []})).status_code == 422
        bad = await c.post("/v1/jobs", content=b"{", headers={"content-type": "application/json"})
        assert bad.status_code == 422
    got = [(r.action, r.target, r.status, r.error) for r in rows(app_store)]
    assert got == [("jobs.enqueue", "", 422, "invalid_input")] * 2


async def test_denied_requests_are_recorded_even_reads(app: Any, app_store: SqliteStore) -> None:
    # the authorization layer marks a refusal in the request's state
    async with client(peer(app, OTHER, denied=True, audit_action="jobs.read")) as c:
        await c.get("/v1/jobs/5")
    async with client(peer(app, OTHER)) as c:
        answer = await c.get("/v1/audit")
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden"
    got = [(r.uid, r.action, r.status, r.error, r.denied) for r in reversed(rows(app_store))]
    assert got == [
        (OTHER, "jobs.read", 404, "not_found", True),
        (OTHER, "audit.read", 403, "forbidden", True),
    ]


async def test_audit_line_is_logged_per_record(app: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jobctl.audit")
    async with client(peer(app, 0, 7, 99)) as c:  # an admin: queues are admins' to pause
        answer = await c.post("/v1/queues/mail/pause")
    lines = [r.getMessage() for r in caplog.records if r.name == "jobctl.audit"]
    rid = answer.headers["x-request-id"]
    assert lines == [
        f"event=audit request_id={rid} uid=0 gid=7 pid=99 action=queues.pause "
        "target=queue:mail status=200 error=- denied=false"
    ]


async def test_an_enqueue_is_one_line_per_job_carrying_the_request_id(
    app: Any, app_store: SqliteStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A created job's ``event=enqueued`` line names the request, so the journal gets one
    line per job, not two; a repeat that creates nothing keeps its audit line."""
    caplog.set_level(logging.INFO)
    keyed = {**JOB, "key": "k1"}
    async with client(peer(app, 0, 7, 99)) as c:
        first = await c.post("/v1/jobs", json=keyed)
        again = await c.post("/v1/jobs", json=keyed)
    assert (first.status_code, again.status_code) == (201, 200)
    rid, rid2 = first.headers["x-request-id"], again.headers["x-request-id"]
    messages = [(r.name, r.getMessage()) for r in caplog.records]
    enqueued = [m for n, m in messages if "event=enqueued" in m]
    assert len(enqueued) == 1 and enqueued[0].endswith(f" request_id={rid}")
    audit_lines = [m for n, m in messages if n == "jobctl.audit"]
    assert len(audit_lines) == 1 and f"request_id={rid2} " in audit_lines[0]
    assert "action=jobs.enqueue" in audit_lines[0] and "status=200" in audit_lines[0]
    app_store.flush_audit()
    assert sorted(r.request_id for r in rows(app_store)) == sorted([rid, rid2])


async def test_every_answer_carries_a_request_id(app: Any) -> None:
    async with client(app) as c:
        answers = [
            await c.post("/v1/jobs", json=JOB),
            await c.get("/v1/jobs"),
            await c.get("/v1/jobs/12345"),
            await c.get("/v1/nowhere"),
            await c.put("/v1/jobs"),
        ]
    ids = [a.headers.get("x-request-id") for a in answers]
    assert all(i and len(i) == 16 for i in ids) and len(set(ids)) == len(ids)


async def test_admin_reads_the_trail_with_filters_and_paging(
    app: Any, app_store: SqliteStore, clock: FakeClock
) -> None:
    async with client(peer(app, OTHER)) as c:
        await c.post("/v1/queues/a/pause")
    clock.advance(60)
    async with client(app) as c:
        for name in ("a", "b", "c"):
            await c.post(f"/v1/queues/{name}/resume")
        await c.post("/v1/jobs", json=JOB)
        everything = (await c.get("/v1/audit")).json()["items"]
        mine = (await c.get("/v1/audit", params={"uid": OTHER})).json()["items"]
        queues = (await c.get("/v1/audit", params={"action": "queues"})).json()["items"]
        recent = (await c.get("/v1/audit", params={"since": "2027-03-01T12:00:30Z"})).json()[
            "items"
        ]
        page = (await c.get("/v1/audit", params={"limit": 2})).json()["items"]
        rest = (await c.get("/v1/audit", params={"before": page[-1]["id"]})).json()["items"]
        naive = await c.get("/v1/audit", params={"since": "2027-03-01T12:00:30"})
    assert [r["action"] for r in everything] == [
        "jobs.enqueue",
        "queues.resume",
        "queues.resume",
        "queues.resume",
        "queues.pause",
    ]
    assert [(r["uid"], r["target"]) for r in mine] == [(OTHER, "queue:a")]
    assert len(queues) == 4 and len(recent) == 4
    assert [r["id"] for r in page + rest] == [r["id"] for r in everything]
    assert everything[-1]["at"] == "2027-03-01T12:00:00.000Z"
    assert set(everything[0]) == {
        "id", "at", "request_id", "uid", "gid", "pid", "action", "target", "status",
        "error", "denied",
    }  # fmt: skip
    assert naive.status_code == 422


async def test_a_500_logs_one_line_and_answers_with_its_request_id(
    app: Any, app_store: SqliteStore, caplog: pytest.LogCaptureFixture, monkeypatch: Any
) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(app_store, "stats", broken)
    monkeypatch.setattr(app_store, "submit_insert_groups", broken)
    caplog.set_level(logging.INFO)
    async with client(app) as c:
        answers = [await c.get("/v1/status"), await c.post("/v1/jobs", json=JOB)]
    for answer in answers:
        rid = answer.headers["x-request-id"]
        assert answer.status_code == 500
        error = answer.json()["error"]
        assert error["request_id"] == rid and rid in error["message"]
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR and rid in r.getMessage()]
        assert len(errors) == 1 and errors[0].exc_info is None
        assert "disk on fire" in errors[0].getMessage()
    assert not any("Traceback" in r.getMessage() for r in caplog.records)
    got = [(r.action, r.status, r.error) for r in rows(app_store)]
    assert got == [("jobs.enqueue", 500, "internal_error")]


async def test_a_500_traceback_is_logged_at_debug_only(
    app: Any, app_store: SqliteStore, caplog: pytest.LogCaptureFixture, monkeypatch: Any
) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(app_store, "stats", broken)
    caplog.set_level(logging.DEBUG, logger="jobctl.api")
    async with client(app) as c:
        rid = (await c.get("/v1/status")).headers["x-request-id"]
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG and rid in r.getMessage()]
    assert len(debug) == 1 and debug[0].exc_info is not None


async def test_audit_retention_prunes_old_rows(
    app: Any, app_store: SqliteStore, clock: FakeClock
) -> None:
    from jobctl.engine.reaper import Reaper

    async with client(app) as c:
        await c.post("/v1/queues/a/pause")
        clock.advance(days=80)
        await c.post("/v1/queues/a/resume")
    clock.advance(days=11)
    reaper = Reaper(AsyncStore(app_store, threads=1), clock, {}, audit_retention=90 * 86400)
    app_store.flush_audit()
    await reaper.run_once()
    assert [r.action for r in app_store.list_audit()] == ["queues.resume"]


async def test_a_failure_after_the_answer_began_is_logged_once(
    app_store: SqliteStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    from jobctl.api.middleware import AuditMiddleware

    async def half(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"[", "more_body": True})
        raise RuntimeError("stream broke")

    caplog.set_level(logging.INFO)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/v1/jobs", "headers": []}
    await AuditMiddleware(half, app_store, clock)(scope, None, send)  # type: ignore[arg-type]
    rid = dict(sent[0]["headers"])[b"x-request-id"].decode()
    assert len(sent) == 2  # nothing more: the server closes the connection
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [rid in r.getMessage() and "stream broke" in r.getMessage() for r in errors] == [True]
