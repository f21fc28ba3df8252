"""Two real daemons (their own sockets, state dirs and lease owners) on one PostgreSQL
database: jobs added through one run once in total, whichever daemon claims them, and
``status`` on either lists both daemons. Skips without a server (fails under
``JOBCTL_REQUIRE_POSTGRES=1``)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.contract.conftest import PG_DSN, pg_database
from tests.integration.conftest import DaemonProc, wait_until
from tests.integration.test_daemon import cli

pytestmark = pytest.mark.postgres
JOBS = 40


@pytest.fixture
def database() -> Iterator[str]:
    """A fresh database ``jobctl_h15s_…`` (dropped afterwards); its URL."""
    for name in pg_database("jobctl_h15s_"):
        yield urlunsplit(urlsplit(PG_DSN)._replace(path="/" + name))


@pytest.fixture
def cluster(tmp_path: Path, database: str) -> Iterator[Callable[..., DaemonProc]]:
    made: list[DaemonProc] = []

    def start(name: str, ttl: str = "6") -> DaemonProc:
        home = tmp_path / name
        d = DaemonProc(
            home,
            "--state-dir", str(home / "state"),
            "--lease-ttl", ttl,
            "--kill-grace", "2",
            "--shutdown-grace", "1",
            "--concurrency", "4",
        )  # fmt: skip
        d.db_arg = database
        made.append(d)
        return d.start()

    yield start
    for d in made:
        d.stop()


def _started(d: DaemonProc) -> set[int]:
    """The jobs ``d`` started (its ``event=started`` lines so far)."""
    while not d.lines.empty():
        d.log.append(d.lines.get_nowait())
    found = (re.search(r"event=started job=(\d+)", line) for line in d.log)
    return {int(m.group(1)) for m in found if m}


def test_two_daemons_share_the_work_each_job_runs_once(
    cluster: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    a, b = cluster("a"), cluster("b")
    out = tmp_path / "ran.txt"
    jobs = [
        {"command": ["sh", "-c", f"echo {i} >> {out}"], "cwd": "/", "key": f"k{i}"}
        for i in range(JOBS)
    ]
    added = a.client().enqueue_many(jobs)
    ids = [j["id"] for j in added]

    def all_done() -> bool:
        return all(a.client().get(i)["status"] == "succeeded" for i in ids)

    wait_until(all_done, timeout=60, what="every job to succeed")
    ran = Counter(out.read_text().split())
    assert ran == Counter(str(i) for i in range(JOBS))  # each once, none twice
    assert all(a.client().get(i)["attempt"] == 1 for i in ids)
    by_a, by_b = _started(a), _started(b)
    assert not by_a & by_b and by_a | by_b == set(ids)  # one start each, all of them
    assert by_b, "no job added through A ran on B"
    owner_a, owner_b = a.client().status()["owner"], b.client().status()["owner"]
    for d in (a, b):
        listed = {x["owner"]: x for x in d.client().status()["daemons"]}
        assert set(listed) == {owner_a, owner_b}
        assert {x["state"] for x in listed.values()} == {"live"}
        assert {x["slots"] for x in listed.values()} == {4}
    shown = cli(a, "status").stdout
    assert shown.count("daemon: ") == 2 and f"pid {b.proc.pid} " in shown  # type: ignore[union-attr]
    b.stop()  # a clean stop is shown as such, not as gone
    states = {x["owner"]: x["state"] for x in a.client().status()["daemons"]}
    assert states == {owner_a: "live", owner_b: "stopped"}


def test_a_schedule_made_on_one_daemon_fires_once_across_both(
    cluster: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    """Both materializers race on the one database: the occurrence is one job."""
    a, b = cluster("a"), cluster("b")
    out = tmp_path / "fired.txt"
    sched = b.client().request(
        "POST",
        "/v1/schedules",
        json_body={"every": 1, "job": {"command": ["sh", "-c", f"echo x >> {out}"], "cwd": "/"}},
    )
    wait_until(lambda: out.exists() and len(out.read_text().split()) >= 3, timeout=30)
    a.client().request("POST", f"/v1/schedules/{sched['id']}/pause")
    jobs = a.client().page("/v1/jobs", {"limit": 1000})["items"]
    mine = [j for j in jobs if j["schedule_id"] == sched["id"]]
    keys = Counter(j["key"] for j in mine)
    assert keys and max(keys.values()) == 1
    assert len({j["scheduled_for"] for j in mine}) == len(mine)


def test_a_killed_daemons_job_is_reclaimed_and_rerun_by_the_other(
    cluster: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    """``kill -9`` of the daemon running a job: once its lease (3 s) has expired, the other
    daemon reclaims it (attempt ``lease_expired``) and runs it again."""
    b = cluster("b", "3")
    first = 'if [ "$JOBCTL_ATTEMPT" = 1 ]; then sleep 30; else echo again; fi'
    job = b.client().enqueue(
        {"command": ["sh", "-c", first], "cwd": "/", "max_attempts": 2, "backoff": {"base": 0}}
    )
    b.wait_for_line(f"event=started job={job['id']} ")
    a = cluster("a", "3")
    survivor = b.client().get(job["id"])["attempts"][0]["pid"]
    try:
        b.signal(signal.SIGKILL)
        b.wait()
        wait_until(lambda: a.client().get(job["id"])["status"] == "succeeded", timeout=30)
        done = a.client().get(job["id"])
        assert [x["outcome"] for x in done["attempts"]] == ["lease_expired", "succeeded"]
        assert job["id"] in _started(a)
        states = {x["pid"]: x["state"] for x in a.client().status()["daemons"]}
        assert states[a.proc.pid] == "live"  # type: ignore[union-attr]
    finally:
        if survivor:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(survivor, signal.SIGKILL)
