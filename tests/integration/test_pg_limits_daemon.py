"""Limits and time that must hold across several daemons on one PostgreSQL database
(issue 15), each checked from what the jobs themselves recorded (their start and end
times, written by the commands), on a database ``jobctl_pgfaults_…`` of the test's own:

- a queue's ``concurrency``, ``rate``/``burst`` and pause hold cluster-wide (4 daemons);
- daemons whose clocks are 30 s and 120 s off (``JOBCTL_CLOCK_SKEW``) measure and log
  their offset (a warning above 5 s), and neither fire a job early nor reclaim a live
  lease;
- schedules created at once through 3 daemons get distinct ids;
- ``pg_listen = off`` (behind a transaction-mode pooler) listens to nothing and still
  runs what another daemon adds.

Skips without a server (fails under ``JOBCTL_REQUIRE_POSTGRES=1``)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.contract.conftest import pg_database
from tests.integration.conftest import DaemonProc, wait_until
from tests.integration.pgkit import Cluster, cluster_of, sql
from tests.integration.test_daemon import cli

pytestmark = pytest.mark.postgres


@pytest.fixture
def dbname() -> Iterator[str]:
    yield from pg_database("jobctl_pgfaults_")


@pytest.fixture
def cluster(tmp_path: Path, dbname: str) -> Iterator[Cluster]:
    yield from cluster_of(tmp_path, dbname)


def timed(where: Path, seconds: float) -> list[str]:
    """A command that records its start and end (epoch seconds) under ``where``."""
    stamp = f"{where}/$JOBCTL_JOB_ID"
    mark = "date +%s.%N > {0}.t; mv {0}.t {0}.{1}"  # whole, or not there yet
    return [
        "sh",
        "-c",
        f"{mark.format(stamp, 'start')}; sleep {seconds}; {mark.format(stamp, 'end')}",
    ]


def spans(where: Path, ids: list[int]) -> list[tuple[float, float]]:
    return [
        (float((where / f"{i}.start").read_text()), float((where / f"{i}.end").read_text()))
        for i in ids
    ]


def ended(where: Path, ids: list[int]) -> bool:
    return all((where / f"{i}.end").exists() for i in ids)


def most_at_once(runs: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in runs] + [(e, -1) for _, e in runs])
    level = top = 0
    for _, step in edges:
        level += step
        top = max(top, level)
    return top


def add_spread(daemons: list[DaemonProc], jobs: list[dict[str, Any]]) -> list[int]:
    """Each job added through the next daemon in turn."""
    return [
        int(daemons[i % len(daemons)].client().enqueue(job)["id"]) for i, job in enumerate(jobs)
    ]


def logged(d: DaemonProc) -> str:
    """Everything ``d`` logged so far."""
    while not d.lines.empty():
        d.log.append(d.lines.get_nowait())
    return "".join(d.log)


def four(cluster: Cluster, slots: int = 4) -> list[DaemonProc]:
    return [cluster.start(name, concurrency=slots) for name in "abcd"]


def test_a_queues_concurrency_holds_across_four_daemons(cluster: Cluster, tmp_path: Path) -> None:
    daemons = four(cluster, slots=1)  # two at once takes two daemons; unchecked, four would
    assert cli(daemons[0], "queues", "set", "q", "--concurrency", "2").returncode == 0
    job = {"command": timed(tmp_path, 0.5), "cwd": "/", "queue": "q"}
    ids = add_spread(daemons, [job] * 12)
    wait_until(lambda: ended(tmp_path, ids), timeout=60, what="every job to end")
    assert most_at_once(spans(tmp_path, ids)) == 2  # never 3, and the limit was used
    ran_on = [re.findall(r"event=started job=(\d+)", logged(d)) for d in daemons]
    assert sum(1 for r in ran_on if r) >= 2


def test_a_queues_rate_holds_across_four_daemons(cluster: Cluster, tmp_path: Path) -> None:
    daemons = four(cluster)
    assert cli(daemons[1], "queues", "set", "r", "--rate", "4/s", "--burst", "1").returncode == 0
    job = {"command": timed(tmp_path, 0), "cwd": "/", "queue": "r"}
    ids = add_spread(daemons, [job] * 8)
    wait_until(lambda: ended(tmp_path, ids), timeout=60, what="every job to end")
    starts = sorted(s for s, _ in spans(tmp_path, ids))
    # a token every 0.25 s, one at a time: 8 starts take 7 intervals at least
    assert starts[-1] - starts[0] >= 7 * 0.25 - 0.1
    for i in range(len(starts)):
        for j in range(i + 1, len(starts)):
            assert starts[j] - starts[i] >= (j - i - 1) * 0.25 - 0.1  # at most burst + rate·t


def test_a_paused_queue_starts_nothing_on_any_daemon(cluster: Cluster, tmp_path: Path) -> None:
    daemons = four(cluster)
    assert cli(daemons[2], "queues", "pause", "p").returncode == 0
    job = {"command": timed(tmp_path, 0), "cwd": "/", "queue": "p"}
    ids = add_spread(daemons, [job] * 4)
    ticks = [d.client().status()["timer"]["ticks"] for d in daemons]

    def each_looked_twice() -> bool:  # every timer passed (the 1 s poll) since the adds
        now = [d.client().status()["timer"]["ticks"] for d in daemons]
        return all(n >= t + 2 for n, t in zip(now, ticks, strict=True))

    wait_until(each_looked_twice, timeout=20)
    assert not any((tmp_path / f"{i}.start").exists() for i in ids)
    assert {daemons[3].client().get(i)["status"] for i in ids} == {"scheduled"}
    assert cli(daemons[3], "queues", "resume", "p").returncode == 0
    wait_until(lambda: ended(tmp_path, ids), timeout=20, what="every job to run once resumed")


def test_clocks_30s_and_120s_off_neither_fire_early_nor_reclaim_early(
    cluster: Cluster, tmp_path: Path, dbname: str
) -> None:
    """A runs a job on a true clock; B (30 s ahead) and C (120 s behind) start. Uncorrected,
    B would take A's lease (3 s TTL) for expired and C would start a due job two minutes
    late; corrected, A's job keeps its lease and a job due in 3 s starts in 3 s."""
    a = cluster.start("a")
    go = tmp_path / "go"
    long = a.client().enqueue(
        {"command": ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"], "cwd": "/"}
    )
    a.wait_for_line(f"event=started job={long['id']} ")
    b = cluster.start("b", env={"JOBCTL_CLOCK_SKEW": "30"})
    c = cluster.start("c", env={"JOBCTL_CLOCK_SKEW": "-120"})
    offsets = {}
    for d in (a, b, c):
        line = d.wait_for_line("event=clock_offset")
        offsets[d] = (float(re.findall(r"seconds=(-?[\d.]+)", line)[0]), line)
    assert abs(offsets[a][0]) < 2 and "level=info" in offsets[a][1].lower()
    assert offsets[b][0] == pytest.approx(-30, abs=2) and "level=warn" in offsets[b][1].lower()
    assert offsets[c][0] == pytest.approx(120, abs=2) and "level=warn" in offsets[c][1].lower()
    for d in (b, c):
        assert abs(_skew_seen(d)) < 2  # the corrected clock, as status reports it
    due = datetime.now(UTC) + timedelta(seconds=3)
    soon = c.client().enqueue(
        {"command": timed(tmp_path, 0), "cwd": "/", "run_at": due.isoformat()}
    )
    leases = [_lease_until(dbname, long["id"])]

    def renewed_twice() -> bool:  # A's lease renewed twice while B and C looked at it
        now = _lease_until(dbname, long["id"])
        if now > leases[-1]:
            leases.append(now)
        return len(leases) >= 3 and ended(tmp_path, [soon["id"]])

    wait_until(renewed_twice, timeout=30, what="two renewals and the due job")
    start = spans(tmp_path, [soon["id"]])[0][0]
    assert due.timestamp() - 0.1 <= start < due.timestamp() + 10, "fired early or late"
    job = a.client().get(long["id"])
    assert job["status"] == "running" and job["attempt"] == 1  # nobody reclaimed it
    go.touch()
    wait_until(lambda: a.client().get(long["id"])["status"] == "succeeded", timeout=20)
    assert [x["outcome"] for x in a.client().get(long["id"])["attempts"]] == ["succeeded"]


def _skew_seen(d: DaemonProc) -> float:
    now = datetime.fromisoformat(d.client().status()["now"].replace("Z", "+00:00"))
    return (now - datetime.now(UTC)).total_seconds()


def _lease_until(dbname: str, job_id: int) -> int:
    rows = sql(dbname, "SELECT lease_until FROM jobs WHERE id = %s", (job_id,))
    return int(rows[0][0] or 0)


def test_schedules_created_at_once_through_three_daemons_get_distinct_ids(
    cluster: Cluster,
) -> None:
    daemons = [cluster.start(n) for n in "abc"]
    made: list[str] = []
    failed: list[BaseException] = []
    gate = threading.Barrier(len(daemons) * 2)

    def create(d: DaemonProc) -> None:
        from jobctl.client import Client

        client = Client(d.socket)  # one connection per thread
        gate.wait()
        try:
            for _ in range(15):
                body = {"every": 3600, "job": {"command": ["true"], "cwd": "/"}}
                made.append(client.request("POST", "/v1/schedules", json_body=body)["id"])
        except BaseException as exc:
            failed.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=create, args=(d,)) for d in daemons * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed
    assert len(made) == len(set(made)) == 90
    listed = daemons[0].client().page("/v1/schedules", {"limit": 1000})["items"]
    assert {s["id"] for s in listed} == set(made)


def test_pg_listen_off_listens_to_nothing_and_still_runs_the_others_jobs(
    cluster: Cluster, dbname: str
) -> None:
    a = cluster.start("a", concurrency=1)
    b = cluster.start("b", env={"JOBCTL_PG_LISTEN": "off"})
    b.wait_for_line("event=listen_off")
    listening = sql(
        dbname,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND query ILIKE 'LISTEN %%'",
        (dbname,),
    )
    assert listening[0][0] == 1  # A's only
    a.client().enqueue({"command": ["sleep", "30"], "cwd": "/"})  # A's one slot taken
    job = a.client().enqueue({"command": ["true"], "cwd": "/"})
    wait_until(lambda: b.client().get(job["id"])["status"] == "succeeded", timeout=10)
    assert f"event=started job={job['id']} " in logged(b)
