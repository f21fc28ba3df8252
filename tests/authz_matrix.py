"""The isolation matrix: owner, other user and admin x every route, each with its answer.

Written once and driven twice: in-process with injected peer credentials
(tests/api/test_authz_api.py) and over a real root daemon's socket as real Unix users
(tests/integration/test_authz_daemon.py). ``call(role, method, path, body)`` sends one
request as that role and returns (HTTP status, decoded JSON or text).

Every route of :data:`jobctl.api.policy.ROUTES` must appear in :data:`COVERED` (the run
checks it), so a new route cannot slip past the matrix either.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from jobctl.api.policy import ROUTES, route_for

Call = Callable[[str, str, str, Any], Awaitable[tuple[int, Any]]]
OWNER, OTHER, ADMIN = "owner", "other", "admin"
ROLES = (OWNER, OTHER, ADMIN)

#: Route templates the matrix has exercised (filled while it runs).
COVERED: set[tuple[str, str]] = set()


def _template(method: str, path: str) -> tuple[str, str]:
    bare = path.split("?", 1)[0]
    route = route_for(method, bare)
    assert route is not None, f"{method} {bare} has no entry in policy.ROUTES"
    return route


async def expect(call: Call, method: str, path: str, body: Any, answers: dict[str, int]) -> None:
    """Send the request as each role in ``answers``' order; each must get its status."""
    COVERED.add(_template(method, path))
    for role, status in answers.items():
        got, data = await call(role, method, path, body)
        assert got == status, f"{role} {method} {path}: {got} (expected {status}): {data}"


def each(owner: int, other: int, admin: int) -> dict[str, int]:
    return {OWNER: owner, OTHER: other, ADMIN: admin}


def others_first(owner: int, admin: int) -> dict[str, int]:
    """A change the other user must not make (404, as for a missing id), then the
    owner and an admin may."""
    return {OTHER: 404, OWNER: owner, ADMIN: admin}


async def run_matrix(call: Call, dead_job: Callable[[], Awaitable[int]]) -> None:
    """The whole matrix. ``dead_job()`` makes a dead job of the owner's with one attempt."""
    COVERED.clear()
    job = await _created(call, OWNER, "/v1/jobs", {"command": ["true"], "run_at": _LATER})
    dead = await dead_job()
    sched = await _created(
        call, OWNER, "/v1/schedules", {"every": 3600, "job": {"command": ["true"]}}
    )

    await _reads_and_lists(call, job, dead, sched["id"])
    await _jobs(call, job, dead)
    await _schedules(call, sched["id"])
    await _dlq(call, dead)
    await _shared_and_admin(call)
    await _keys(call, sched["id"])
    await _secrets(call)
    await _workers(call)
    await _worker_batch(call)
    missing = set(ROUTES) - COVERED
    assert not missing, f"routes the matrix never tried: {sorted(missing)}"


_LATER = "2099-01-01T00:00:00Z"


async def _created(call: Call, role: str, path: str, body: Any) -> dict[str, Any]:
    status, data = await call(role, "POST", path, body)
    assert status == 201, (status, data)
    assert isinstance(data, dict)
    return data


async def _reads_and_lists(call: Call, job: dict[str, Any], dead: int, sid: str) -> None:
    jid = job["id"]
    await expect(call, "GET", f"/v1/jobs/{jid}", None, each(200, 404, 200))
    await expect(call, "GET", f"/v1/jobs/{dead}/attempts/1/log", None, each(200, 404, 200))
    await expect(call, "GET", f"/v1/jobs/{dead}/attempts", None, each(200, 404, 200))
    await expect(call, "GET", f"/v1/dlq/{dead}", None, each(200, 404, 200))
    await expect(call, "GET", f"/v1/schedules/{sid}", None, each(200, 404, 200))
    # ids leak nothing: another user's job answers exactly what a missing one does
    _, theirs = await call(OTHER, "GET", f"/v1/jobs/{jid}", None)
    _, missing = await call(OTHER, "GET", "/v1/jobs/999999", None)
    assert theirs == {"error": {**missing["error"], "message": f"no job {jid}", "job_id": jid}}
    for path in ("/v1/jobs", "/v1/dlq", "/v1/schedules"):
        await expect(call, "GET", path, None, each(200, 200, 200))
        await expect(call, "GET", f"{path}?all_users=true", None, each(403, 403, 200))
        _, mine = await call(OWNER, "GET", path, None)
        _, seen = await call(OTHER, "GET", path, None)
        _, every = await call(ADMIN, "GET", f"{path}?all_users=true", None)
        ours = {x["id"] for x in mine["items"]}
        assert ours and not ours & {x["id"] for x in seen["items"]}, path
        assert ours <= {x["id"] for x in every["items"]}, path
        await _cursors_stay_with_their_list(call, path)
    _, refused = await call(OTHER, "GET", "/v1/jobs?all_users=true", None)
    assert refused["error"]["code"] == "forbidden" and "admin" in refused["error"]["message"]


async def _cursors_stay_with_their_list(call: Call, path: str) -> None:
    """A cursor is good only for the list (caller, filters) it came from: an admin's
    everyone's-page cursor, or another user's, is refused, never a view of their rows."""
    _, first = await call(ADMIN, "GET", f"{path}?all_users=true&limit=1", None)
    if first["next_cursor"] is None:
        return
    status, refused = await call(OWNER, "GET", f"{path}?cursor={first['next_cursor']}", None)
    assert status == 422 and "another" in refused["error"]["message"], (path, refused)
    _, own = await call(OWNER, "GET", f"{path}?limit=1", None)
    if own["next_cursor"] is not None:
        status, _ = await call(OTHER, "GET", f"{path}?cursor={own['next_cursor']}", None)
        assert status == 422, path


async def _jobs(call: Call, job: dict[str, Any], dead: int) -> None:
    await expect(call, "POST", "/v1/jobs", {"command": ["true"]}, each(201, 201, 201))
    jid = job["id"]
    await expect(call, "POST", f"/v1/jobs/{jid}/cancel", None, others_first(200, 200))
    _, shown = await call(OWNER, "GET", f"/v1/jobs/{jid}", None)
    assert shown["status"] == "cancelled"
    rerun = f"/v1/jobs/{jid}/rerun"
    await expect(call, "POST", rerun, {"run_at": _LATER}, others_first(201, 201))
    _, again = await call(ADMIN, "POST", rerun, {"run_at": _LATER})
    assert again["owner_uid"] == shown["owner_uid"] and again["id"] != jid  # the owner's job


async def _schedules(call: Call, sid: str) -> None:
    body = {"every": 3600, "job": {"command": ["true"]}}
    await expect(call, "POST", "/v1/schedules", body, each(201, 201, 201))
    for action in ("pause", "resume"):
        await expect(call, "POST", f"/v1/schedules/{sid}/{action}", None, others_first(200, 200))
    edit = {"cron": "0 7 * * *", "job": {"priority": 3}}
    await expect(call, "PATCH", f"/v1/schedules/{sid}", edit, others_first(200, 200))
    _, shown = await call(OWNER, "GET", f"/v1/schedules/{sid}", None)
    assert shown["cron"] == "0 7 * * *" and shown["job"]["priority"] == 3
    trigger = f"/v1/schedules/{sid}/trigger"
    await expect(call, "POST", trigger, None, others_first(201, 201))
    await expect(call, "DELETE", f"/v1/schedules/{sid}", None, others_first(200, 200))


async def _dlq(call: Call, dead: int) -> None:
    replay = "/v1/dlq/replay"
    await expect(call, "POST", replay, {"ids": [dead], "rate": None}, others_first(200, 200))
    await expect(call, "POST", replay, {"limit": 10}, each(200, 200, 200))
    await expect(call, "POST", replay, {"all_users": True}, each(403, 403, 200))
    purge = "/v1/dlq?older_than=1000000"
    await expect(call, "DELETE", purge, None, each(200, 200, 200))
    await expect(call, "DELETE", purge + "&all_users=true", None, each(403, 403, 200))


async def _shared_and_admin(call: Call) -> None:
    for path in ("/v1/status", "/v1/queues", "/v1/metrics", "/v1/openapi.json"):
        await expect(call, "GET", path, None, each(200, 200, 200))
    await expect(call, "PATCH", "/v1/queues/shared", {"concurrency": 2}, each(403, 403, 200))
    # a queue's job defaults: its notifier runs as each of its jobs' owners (admins only)
    defaults = {"nice": 5, "on_failure": "logger failed"}
    await expect(call, "PATCH", "/v1/queues/shared", defaults, each(403, 403, 200))
    for action in ("pause", "resume"):
        await expect(call, "POST", f"/v1/queues/shared/{action}", None, each(403, 403, 200))
    await expect(call, "POST", "/v1/prune", {"dry_run": True}, each(403, 403, 200))
    await expect(call, "GET", "/v1/config", None, each(403, 403, 200))
    await expect(call, "GET", "/v1/audit", None, each(403, 403, 200))
    _, refused = await call(OTHER, "POST", "/v1/queues/shared/pause", None)
    assert refused["error"]["code"] == "forbidden" and "admins" in refused["error"]["message"]


async def _keys(call: Call, sid: str) -> None:
    """Keys are per owner; occurrence keys are the materializer's (no squatting)."""
    status, mine = await call(OWNER, "POST", "/v1/jobs", {"command": ["true"], "key": "k1"})
    assert status == 201
    status, theirs = await call(OTHER, "POST", "/v1/jobs", {"command": ["false"], "key": "k1"})
    assert status == 201 and theirs["id"] != mine["id"], theirs
    status, again = await call(OTHER, "POST", "/v1/jobs", {"command": ["false"], "key": "k1"})
    assert status == 200 and again["id"] == theirs["id"]
    for key in (f"{sid}@2099-01-01T00:00:00Z", f"{sid}@manual-2099-01-01T00:00:00Z"):
        for role in ROLES:
            status, data = await call(role, "POST", "/v1/jobs", {"command": ["true"], "key": key})
            assert status == 422 and "only the scheduler" in data["error"]["message"], data


async def _secrets(call: Call) -> None:
    """A webhook secret's value is its owner's and admins' only; another user gets 404
    (as for a name that does not exist) and never sees a value in a list."""
    status, made = await call(OWNER, "POST", "/v1/secrets", {"name": "hook"})
    assert status == 201 and made["secret"].startswith("whsec_"), made
    uid = made["owner_uid"]
    path = f"/v1/secrets/hook?uid={uid}"
    await expect(call, "GET", path, None, each(200, 404, 200))
    _, seen = await call(ADMIN, "GET", path, None)
    assert seen["secret"] == made["secret"]
    _, refused = await call(OTHER, "GET", path, None)
    assert "whsec_" not in str(refused)
    body = {"name": "hook2", "owner_uid": uid}
    await expect(call, "POST", "/v1/secrets", body, each(201, 404, 409))
    await expect(call, "GET", "/v1/secrets", None, each(200, 200, 200))
    await expect(call, "GET", "/v1/secrets?all_users=true", None, each(403, 403, 200))
    _, theirs = await call(OTHER, "GET", "/v1/secrets", None)
    _, every = await call(ADMIN, "GET", "/v1/secrets?all_users=true", None)
    assert uid not in {s["owner_uid"] for s in theirs} and "whsec_" not in str(every)
    assert {"hook", "hook2"} <= {s["name"] for s in every if s["owner_uid"] == uid}
    rotate = f"/v1/secrets/hook/rotate?uid={uid}&grace=60"
    await expect(call, "POST", rotate, None, others_first(200, 200))
    _, now = await call(OWNER, "GET", path, None)
    assert now["secret"] != made["secret"] and now["previous"] is not None
    await expect(call, "DELETE", path, None, others_first(200, 404))


async def _leased(call: Call, role: str, queue: str) -> list[dict[str, Any]]:
    status, data = await call(role, "POST", "/v1/leases", {"queues": [queue], "max": 5})
    assert status == 200, data
    leases: list[dict[str, Any]] = data["leases"]
    return leases


async def _workers(call: Call) -> None:
    """Pull workers: a worker leases its own payload jobs only, unless the queue's list
    (set by admins) names it; another user's lease is 404; a repeat of the recorded
    complete, fail or release answers 200 again."""
    q = "wq-matrix"
    job = await _created(call, OWNER, "/v1/jobs", {"payload": {"n": 1}, "queue": q})
    COVERED.add(("POST", "/v1/leases"))
    assert await _leased(call, OTHER, q) == []  # not the owner's jobs
    [lease] = await _leased(call, OWNER, q)
    assert lease["id"] == job["id"] and lease["payload"] == {"n": 1}
    await expect(call, "POST", "/v1/leases", {"queues": [q]}, each(200, 200, 200))
    gen = {"generation": lease["generation"]}
    base = f"/v1/leases/{job['id']}"
    await expect(call, "POST", f"{base}/heartbeat", gen, others_first(200, 200))
    await expect(call, "POST", f"{base}/complete", gen | {"result": 1}, others_first(200, 200))
    status, stale = await call(OWNER, "POST", f"{base}/fail", gen | {"error": "x"})
    assert status == 409 and stale["error"]["code"] == "lease_lost", stale
    # dead at its failure (one attempt): a retry due again would be leased below too
    second = await _created(
        call, OWNER, "/v1/jobs", {"payload": [2], "queue": q, "max_attempts": 1}
    )
    [lease2] = await _leased(call, OWNER, q)
    fail = {"generation": lease2["generation"], "error": "Traceback: boom"}
    await expect(call, "POST", f"/v1/leases/{second['id']}/fail", fail, others_first(200, 200))
    fourth = await _created(call, OWNER, "/v1/jobs", {"payload": 4, "queue": q})
    [lease4] = await _leased(call, OWNER, q)
    back = {"generation": lease4["generation"], "delay": 3600.0}  # not leased again below
    await expect(call, "POST", f"/v1/leases/{fourth['id']}/release", back, others_first(200, 200))
    _, theirs = await call(OTHER, "POST", "/v1/jobs", {"command": ["true"]})
    allow = {"allow": [f"uid:{theirs['owner_uid']}"]}
    await expect(call, "PUT", f"/v1/queues/{q}/workers", allow, each(403, 403, 200))
    third = await _created(call, OWNER, "/v1/jobs", {"payload": 3, "queue": q})
    assert [x["id"] for x in await _leased(call, OTHER, q)] == [third["id"]]
    await _live_workers(call, q)


async def _live_workers(call: Call, q: str) -> None:
    """A queue's workers: everyone may look; the live list names the caller's own worker
    only (an admin's: every worker), the count of leases is everyone's."""
    path = f"/v1/queues/{q}/workers"
    await expect(call, "GET", path, None, each(200, 200, 200))
    seen = {role: (await call(role, "GET", path, None))[1] for role in (OWNER, OTHER, ADMIN)}
    assert all(s["leases"] == 1 and s["workers"] for s in seen.values()), seen
    assert seen[OWNER]["live"] == [] and len(seen[OTHER]["live"]) == 1, seen
    assert seen[ADMIN]["live"] == seen[OTHER]["live"], seen


async def _worker_batch(call: Call) -> None:
    """Outcomes in a lease request's ``finish`` list: per item, a job the caller may not
    finish (another user's, leased by its owner) is ``not_found`` and stays running; its
    owner and admins finish theirs; the request itself is 200 for everyone."""
    q = "wq-matrix-batch"
    a = await _created(call, OWNER, "/v1/jobs", {"payload": "a", "queue": q})
    b = await _created(call, OWNER, "/v1/jobs", {"payload": "b", "queue": q})
    status, data = await call(OWNER, "POST", "/v1/leases", {"queues": [q], "max": 2})
    assert status == 200 and len(data["leases"]) == 2, data
    gen = {x["id"]: x["generation"] for x in data["leases"]}

    def finish(job: dict[str, Any]) -> dict[str, Any]:
        item = {"id": job["id"], "generation": gen[job["id"]], "outcome": "complete"}
        return {"queues": [q], "max": 0, "finish": [item]}

    status, data = await call(OTHER, "POST", "/v1/leases", finish(a))
    assert status == 200 and data["finished"][0]["error"]["code"] == "not_found", data
    _, seen = await call(OWNER, "GET", f"/v1/jobs/{a['id']}", None)
    assert seen["status"] == "running", seen
    for role, job in ((ADMIN, a), (OWNER, b)):
        status, data = await call(role, "POST", "/v1/leases", finish(job))
        assert status == 200 and data["finished"][0]["status"] == "succeeded", data
