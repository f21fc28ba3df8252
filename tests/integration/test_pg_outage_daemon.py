"""The database going away under several daemons (issue 15), on a database
``jobctl_pgfaults_…`` of the test's own; the server itself is never stopped (other tests
use it): the daemons reach it through a TCP proxy the test cuts, and their connections are
ended with ``pg_terminate_backend``.

- while it is away: the daemons stay up, ``status`` says the store is unavailable, a write
  answers 503 with ``Retry-After`` (the CLI: one ``jobctl: error:`` line, exit 9), fast;
  a running command keeps running while its lease is valid;
- every connection ended at once, repeatedly, while jobs are added: nothing acknowledged
  is lost, each job runs once;
- once it is back: work resumes by itself within 5 s;
- ``kill -9`` of one of three daemons running jobs: the others reclaim them once their
  leases expire, and the killed one, restarted, stops the commands it left.

Skips without a server (fails under ``JOBCTL_REQUIRE_POSTGRES=1``)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobctl.errors import JobctlError
from tests.contract.conftest import pg_database
from tests.integration.conftest import DaemonProc, wait_until
from tests.integration.pgkit import Cluster, cluster_of, raw, terminate_all, upstream
from tests.integration.tcpcut import TcpCut
from tests.integration.test_daemon import cli

pytestmark = pytest.mark.postgres
#: Seconds a write may take to be refused while the database is away (a pooled
#: connection is waited for 3 s at most, then 503).
REFUSED_WITHIN = 8.0


@pytest.fixture
def dbname() -> Iterator[str]:
    yield from pg_database("jobctl_pgfaults_")


@pytest.fixture
def proxy() -> Iterator[TcpCut]:
    cut = TcpCut(upstream())
    yield cut
    cut.close()


@pytest.fixture
def cluster(tmp_path: Path, dbname: str, proxy: TcpCut) -> Iterator[Cluster]:
    yield from cluster_of(tmp_path, dbname)


def _in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def _succeeded(d: DaemonProc, ids: list[int]) -> bool:
    return all(d.client().get(i)["status"] == "succeeded" for i in ids)


def test_the_database_away_for_every_daemon_then_back(
    cluster: Cluster, proxy: TcpCut, tmp_path: Path, dbname: str
) -> None:
    """Two daemons through one proxy (lease TTL 60 s: renewed every 20 s, given up 40 s
    after the last renewal, so the outage below, 5-20 s on a loaded machine, stays
    inside every lease)."""
    a = cluster.start("a", ttl=60, port=proxy.port)
    b = cluster.start("b", ttl=60, port=proxy.port)
    go, ran = tmp_path / "go", tmp_path / "ran.txt"
    long = a.client().enqueue(
        {
            "command": [
                "sh",
                "-c",
                f"while [ ! -e {go} ]; do sleep 0.05; done; echo long >> {ran}",
            ],
            "cwd": "/",
        }
    )
    pid = _pid_of(a, long["id"])
    # acknowledged before the outage, due during it
    later = [
        (a if i % 2 else b)
        .client()
        .enqueue({"command": ["sh", "-c", f"echo {i} >> {ran}"], "cwd": "/", "run_at": _in(1)})[
            "id"
        ]
        for i in range(6)
    ]
    proxy.cut()
    t0 = time.monotonic()
    shown = cli(a, "status")
    assert shown.returncode == 0 and "STORE UNAVAILABLE" in shown.stdout, shown.stderr
    assert "jobs: " not in shown.stdout  # no counts it could not read
    added = cli(b, "add", "--", "true")
    lines = added.stderr.splitlines()
    assert added.returncode == 9 and len(lines) == 1, added.stderr
    assert lines[0].startswith("jobctl: error: the database is unavailable")
    for d in (a, b):
        state = d.client().status()
        assert state["state"] == "unavailable" and "database is unavailable" in state["degraded"]
        status, headers, body = raw(d, "POST", "/v1/jobs", {"command": ["true"], "cwd": "/"})
        assert status == 503 and int(headers["retry-after"]) >= 1
        assert body["error"]["code"] == "store_unavailable"
        assert d.proc is not None and d.proc.poll() is None  # the daemon stays up
    assert time.monotonic() - t0 < 6 * REFUSED_WITHIN, "refusals took too long"
    assert Path(f"/proc/{pid}").exists()  # its lease still holds: it keeps running
    proxy.mend()
    back = time.monotonic()
    assert terminate_all(dbname) >= 0  # and every connection ended as it comes back
    added_after = _add_until_accepted(a, {"command": ["sh", "-c", f"echo after >> {ran}"]})
    wait_until(lambda: _succeeded(a, [added_after, *later]), timeout=10)
    assert time.monotonic() - back < 5 + 2, "work did not resume within 5 s"  # 2: load
    go.touch()
    wait_until(lambda: _succeeded(b, [long["id"]]), timeout=20)
    done = a.client().get(long["id"])
    assert [x["outcome"] for x in done["attempts"]] == ["succeeded"]  # one attempt, kept
    assert Counter(ran.read_text().split()) == Counter(
        ["long", "after", *(str(i) for i in range(6))]
    )
    for d in (a, b):
        assert d.client().status()["state"] == "ok"
        assert sum("event=leases_given_up" in x for x in d.log) == 0


def _pid_of(d: DaemonProc, job_id: int) -> int:
    def recorded() -> object:
        attempts = d.client().get(job_id)["attempts"]
        return attempts and attempts[0]["pid"]

    wait_until(recorded, timeout=20, what="the command's pid")
    return int(d.client().get(job_id)["attempts"][0]["pid"])


def _add_until_accepted(d: DaemonProc, job: dict[str, object]) -> int:
    """Add ``job``, again while the daemon answers 503 (the database coming back)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return int(d.client().enqueue({"cwd": "/", **job})["id"])
        except JobctlError as exc:
            if time.monotonic() > deadline or exc.code != "store_unavailable":
                raise
            time.sleep(0.05)


def test_connections_ended_while_jobs_are_added_lose_nothing_acknowledged(
    cluster: Cluster, tmp_path: Path, dbname: str
) -> None:
    """Every connection of the database ended, ten times, while two clients add jobs
    through two daemons: each acknowledged job runs exactly once; refusals are 503s."""
    a, b = cluster.start("a"), cluster.start("b")
    ran = tmp_path / "ran.txt"
    acked: list[str] = []
    refused: list[str] = []
    stop = threading.Event()

    def add(d: DaemonProc, prefix: str) -> None:
        for i in range(40):
            key = f"{prefix}{i}"
            job = {"command": ["sh", "-c", f"echo {key} >> {ran}"], "cwd": "/", "key": key}
            try:
                d.client().enqueue(job)
            except JobctlError as exc:
                refused.append(exc.code)
                continue
            acked.append(key)

    adders = [threading.Thread(target=add, args=(d, p)) for d, p in ((a, "a"), (b, "b"))]
    for t in adders:
        t.start()
    ended = 0
    for _ in range(10):
        ended += terminate_all(dbname)
        time.sleep(0.05)
    for t in adders:
        t.join()
    stop.set()
    seen = [x for d in (a, b) for x in (*d.log, *list(d.lines.queue))]
    resent = sum("event=pg_pipelined_resent" in x for x in seen)
    print(f"acked={len(acked)} refused={len(refused)} ended={ended} resent={resent}")  # -s
    assert ended > 0
    assert set(refused) <= {"store_unavailable"}
    assert len(acked) >= 72, refused  # a lost connection is retried on a fresh one

    def all_ran() -> bool:
        return ran.exists() and set(acked) <= set(ran.read_text().split())

    wait_until(all_ran, timeout=30, what="every acknowledged job to run")
    counts = Counter(ran.read_text().split())
    assert max(counts.values()) == 1, "a job ran twice"
    for d in (a, b):
        assert d.proc is not None and d.proc.poll() is None


def test_kill_9_of_one_of_three_daemons_its_jobs_reclaimed_survivors_stopped_on_restart(
    cluster: Cluster,
) -> None:
    """B runs three jobs and is killed with ``kill -9``; once their leases (3 s) expire, A
    and C reclaim them (attempt ``lease_expired``) and run them again; B restarted stops
    the three commands it had left running."""
    first = 'if [ "$JOBCTL_ATTEMPT" = 1 ]; then sleep 60; else echo again; fi'
    b = cluster.start("b")
    ids = [
        b.client().enqueue(
            {"command": ["sh", "-c", first], "cwd": "/", "max_attempts": 2, "backoff": {"base": 0}}
        )["id"]
        for _ in range(3)
    ]
    survivors = [_pid_of(b, i) for i in ids]
    a, c = cluster.start("a"), cluster.start("c")
    try:
        b.signal(signal.SIGKILL)
        b.wait()
        wait_until(lambda: _succeeded(a, ids), timeout=30, what="every job reclaimed and rerun")
        for i in ids:
            outcomes = [x["outcome"] for x in a.client().get(i)["attempts"]]
            assert outcomes == ["lease_expired", "succeeded"]
        assert all(Path(f"/proc/{pid}").exists() for pid in survivors)  # nobody stopped them
        b.start()
        for i in ids:
            b.wait_for_line(f"event=stopping_survivor job={i} ", timeout=10)
        wait_until(
            lambda: not any(_alive(pid) for pid in survivors), timeout=10, what="survivors to stop"
        )
        states = {x["pid"]: x["state"] for x in c.client().status()["daemons"]}
        assert states[a.proc.pid] == states[c.proc.pid] == "live"  # type: ignore[union-attr]
    finally:
        for pid in survivors:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
