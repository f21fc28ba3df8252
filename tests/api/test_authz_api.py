"""Authorization in-process: different peer identities against one app on a real store.

The identity is put where the server puts it (``scope["state"]["peer_uid"]`` etc., read
from SO_PEERCRED at accept); in-process the daemon's own user is the admin.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobctl.access import Access
from jobctl.api.app import Hooks, create_app
from jobctl.domain.models import AttemptResult
from jobctl.domain.states import Outcome
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore
from tests.authz_matrix import ADMIN, OTHER, OWNER, run_matrix

UIDS = {OWNER: 50_001, OTHER: 50_002, ADMIN: os.geteuid()}


class As:
    """The app as seen by one peer: its credentials in the scope, its last state kept."""

    def __init__(self, app: Any, uid: int) -> None:
        self.app = app
        self.uid = uid
        self.last: MutableMapping[str, Any] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        scope["state"] = {"peer_uid": self.uid, "peer_gid": self.uid, "peer_pid": 4242}
        self.last = scope["state"]
        await self.app(scope, receive, send)


class Peers:
    def __init__(self, app: Any, store: SqliteStore) -> None:
        self.store = store
        self.apps = {role: As(app, uid) for role, uid in UIDS.items()}
        self.clients = {
            role: httpx.AsyncClient(transport=httpx.ASGITransport(app=a), base_url="http://j")
            for role, a in self.apps.items()
        }

    async def call(self, role: str, method: str, path: str, body: Any) -> tuple[int, Any]:
        r = await self.clients[role].request(method, path, json=body)
        if r.headers.get("content-type", "").startswith("application/json"):
            return r.status_code, r.json()
        return r.status_code, r.text

    def state(self, role: str) -> MutableMapping[str, Any]:
        return self.apps[role].last

    async def dead_job(self) -> int:
        status, job = await self.call(
            OWNER, "POST", "/v1/jobs", {"command": ["false"], "max_attempts": 1}
        )
        assert status == 201
        for c in self.store.claim_due("w", 100, 30):
            self.store.finish(c.job.id, c.generation, AttemptResult(Outcome.FAILED, 1, "exit 1"))
        assert self.store.get(job["id"]).dead_reason == "max_attempts"
        return int(job["id"])

    async def close(self) -> None:
        for c in self.clients.values():
            await c.aclose()


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "jobctl.allow", tmp_path / "jobctl.deny"


@pytest.fixture
def store(tmp_path: Path, clock: Any) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "authz.db", clock)
    yield s
    s.close()


@pytest.fixture
async def peers(store: SqliteStore, files: tuple[Path, Path]) -> AsyncIterator[Peers]:
    astore = AsyncStore(store, threads=2)
    app = create_app(astore, Hooks(access=Access(*files)))
    p = Peers(app, store)
    yield p
    await p.close()
    astore.close()


async def test_the_isolation_matrix(peers: Peers) -> None:
    await run_matrix(peers.call, peers.dead_job)


async def test_decisions_are_recorded_for_the_audit_trail(peers: Peers) -> None:
    status, job = await peers.call(OWNER, "POST", "/v1/jobs", {"command": ["true"]})
    assert status == 201  # the fast path
    assert peers.state(OWNER)["audit_action"] == "write_own"
    assert "denied" not in peers.state(OWNER)
    await peers.call(OWNER, "GET", f"/v1/jobs/{job['id']}", None)
    assert peers.state(OWNER)["audit_action"] == "read_own"
    assert "denied" not in peers.state(OWNER)
    status, _ = await peers.call(OTHER, "POST", f"/v1/jobs/{job['id']}/cancel", None)
    assert status == 404
    assert peers.state(OTHER)["audit_action"] == "write_own"
    assert peers.state(OTHER)["denied"] is True
    status, _ = await peers.call(OTHER, "POST", "/v1/queues/q/pause", None)
    assert status == 403 and peers.state(OTHER)["audit_action"] == "queue_admin"
    assert peers.state(OTHER)["denied"] is True
    status, _ = await peers.call(OTHER, "GET", "/v1/jobs/999999", None)
    assert status == 404 and "denied" not in peers.state(OTHER)  # truly missing


async def test_a_missing_and_another_users_job_answer_alike(peers: Peers) -> None:
    _, job = await peers.call(OWNER, "POST", "/v1/jobs", {"command": ["true"]})
    jid = job["id"]
    gone = jid + 1000
    for path in ("/v1/jobs/{}", "/v1/dlq/{}", "/v1/jobs/{}/attempts/1/log"):
        theirs = await peers.clients[OTHER].get(path.format(jid))
        missing = await peers.clients[OTHER].get(path.format(gone))
        assert theirs.status_code == missing.status_code == 404
        assert theirs.text == missing.text.replace(str(gone), str(jid))
    _, sched = await peers.call(
        OWNER, "POST", "/v1/schedules", {"every": 60, "name": "nightly", "job": {"command": ["x"]}}
    )
    for ref in (sched["id"], "nightly"):
        status, data = await peers.call(OTHER, "POST", f"/v1/schedules/{ref}/trigger", None)
        assert status == 404 and data["error"]["message"] == f"no schedule {ref!r}"


async def test_the_allow_file_refuses_everyone_it_does_not_list(
    peers: Peers, files: tuple[Path, Path]
) -> None:
    allow, deny = files
    assert (await peers.call(OWNER, "GET", "/v1/status", None))[0] == 200
    allow.write_text("# nobody but\nsomeone-else\n")
    for method, path in (("GET", "/v1/status"), ("POST", "/v1/jobs"), ("GET", "/nope")):
        status, data = await peers.call(OWNER, method, path, {"command": ["true"]})
        assert status == 403, (path, data)
        assert (
            "is not listed in" in data["error"]["message"]
            and str(allow) in data["error"]["message"]
        )
    assert peers.state(OWNER)["denied"] is True
    assert (await peers.call(ADMIN, "GET", "/v1/status", None))[0] == 200  # root always may
    allow.unlink()
    deny.write_text("")  # an empty deny file refuses nobody
    assert (await peers.call(OWNER, "GET", "/v1/status", None))[0] == 200


async def test_an_unreadable_allow_file_fails_closed(
    peers: Peers, files: tuple[Path, Path]
) -> None:
    allow, _ = files
    allow.mkdir()  # exists, cannot be read as a file (root reads any mode, not a directory)
    status, data = await peers.call(OTHER, "GET", "/v1/jobs", None)
    assert status == 403 and "cannot be read" in data["error"]["message"]
    assert (await peers.call(ADMIN, "GET", "/v1/jobs", None))[0] == 200


async def test_an_occurrence_key_in_a_batch_is_named(peers: Peers) -> None:
    body = [{"command": ["true"], "key": "fine"}, {"command": ["true"], "key": "sch-1@x"}]
    status, data = await peers.call(OWNER, "POST", "/v1/jobs", body)
    assert status == 422 and data["error"]["message"].startswith("1.key: 'sch-1@x'")
    status, data = await peers.call(OWNER, "GET", "/v1/jobs", None)
    assert data["items"] == []  # nothing of the batch was kept


async def test_metrics_every_user_reads_name_no_user(peers: Peers) -> None:
    """Metrics are a shared read because they are aggregate: no label names a user."""
    await peers.call(OWNER, "POST", "/v1/jobs", {"command": ["true"]})
    await peers.dead_job()
    status, text = await peers.call(OTHER, "GET", "/v1/metrics", None)
    assert status == 200 and "jobctl_" in text
    labels = set()
    for line in text.splitlines():
        if not line.startswith("#") and "{" in line:
            inside = line[line.index("{") + 1 : line.rindex("}")]
            labels |= {part.split("=", 1)[0] for part in inside.split(",") if "=" in part}
    assert labels and not {x for x in labels if any(w in x for w in ("owner", "uid", "user"))}
    assert str(UIDS[OWNER]) not in text


async def test_schedule_names_are_each_users_own(peers: Peers) -> None:
    body = {"every": 60, "name": "report", "job": {"command": ["true"]}}
    status, mine = await peers.call(OWNER, "POST", "/v1/schedules", body)
    assert status == 201
    status, theirs = await peers.call(OTHER, "POST", "/v1/schedules", body)
    assert status == 201 and theirs["id"] != mine["id"]  # the name taken by another is no 409
    _, shown = await peers.call(OTHER, "GET", "/v1/schedules/report", None)
    assert shown["id"] == theirs["id"]
    status, _ = await peers.call(ADMIN, "GET", "/v1/schedules/report", None)
    assert status == 404  # the admin has no "report": others' schedules by id
    assert (await peers.call(ADMIN, "GET", f"/v1/schedules/{mine['id']}", None))[0] == 200
