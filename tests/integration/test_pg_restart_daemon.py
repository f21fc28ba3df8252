"""A real PostgreSQL restart under two daemons (issue 15, "the database going away"), on
a private server of this module's own (tests/integration/pgserver.py), stopped with
``pg_ctl stop -m fast`` (a clean restart) and ``-m immediate`` (a crash: the start
replays the WAL), then started again:

- while it is down: the daemons stay up, ``status`` says the store is unavailable, a write
  answers 503 with ``Retry-After`` and the CLI one ``jobctl: error:`` line; a running
  command keeps running through failed heartbeats while its lease is valid;
- nothing acknowledged is lost, even by the crash in the middle of adds, and each job
  runs once;
- once it is back: work resumes by itself within 5 s, the leases are renewed.

Skips without the server binaries (fails under ``JOBCTL_REQUIRE_POSTGRES=1``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobctl.client import Client
from jobctl.errors import JobctlError
from tests.integration.conftest import DaemonProc, wait_until
from tests.integration.pgkit import Cluster, cluster_of, raw
from tests.integration.pgserver import PrivateServer, private_server
from tests.integration.test_daemon import cli

pytestmark = pytest.mark.postgres
#: Lease TTL of these daemons: renewed every 20 s and given up 40 s after the last renewal
#: (at worst the claim), so an outage that lasts until a heartbeat has failed (20 s, and
#: 3 s waiting for a connection), the refusals checked meanwhile (each waits 3 s for a
#: connection: 10-15 s on a loaded machine) and the restart all fit inside it.
TTL = 60
#: Seconds within which work must resume once the server is back (the promise), and the
#: room a loaded 2-core machine is given on top of it.
RESUME_WITHIN, LOAD_SLACK = 5.0, 2.0


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateServer]:
    yield from private_server()


@pytest.fixture
def dbname(server: PrivateServer) -> Iterator[str]:
    yield from server.database("jobctl_pgrestart_")


@pytest.fixture
def cluster(tmp_path: Path, dbname: str) -> Iterator[Cluster]:
    yield from cluster_of(tmp_path, dbname)


def _start(cluster: Cluster, server: PrivateServer, name: str) -> DaemonProc:
    return cluster.start(name, ttl=TTL, port=server.port)


def _in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def _succeeded(d: DaemonProc, ids: list[int]) -> bool:
    return all(d.client().get(i)["status"] == "succeeded" for i in ids)


def _pid_of(d: DaemonProc, job_id: int) -> int:
    def recorded() -> object:
        attempts = d.client().get(job_id)["attempts"]
        return attempts and attempts[0]["pid"]

    wait_until(recorded, timeout=20, what="the command's pid")
    return int(d.client().get(job_id)["attempts"][0]["pid"])


def _add_until_accepted(d: DaemonProc, command: str) -> int:
    """Add a job running ``command``, again while the daemon answers 503 (the server
    coming back: its connections are re-made on the next request)."""
    deadline = time.monotonic() + RESUME_WITHIN
    while True:
        try:
            return int(d.client().enqueue({"command": ["sh", "-c", command], "cwd": "/"})["id"])
        except JobctlError as exc:
            if time.monotonic() > deadline or exc.code != "store_unavailable":
                raise
            time.sleep(0.05)


def _assert_refused(d: DaemonProc) -> None:
    """What a client meets while the database is down, through ``d``."""
    shown = cli(d, "status")
    assert shown.returncode == 0 and "STORE UNAVAILABLE" in shown.stdout, shown.stderr
    added = cli(d, "add", "--", "true")
    lines = added.stderr.splitlines()
    assert added.returncode == 9 and len(lines) == 1, added.stderr
    assert lines[0].startswith("jobctl: error: the database is unavailable")
    status, headers, body = raw(d, "POST", "/v1/jobs", {"command": ["true"], "cwd": "/"})
    assert status == 503 and int(headers["retry-after"]) >= 1
    assert body["error"]["code"] == "store_unavailable"
    assert d.proc is not None and d.proc.poll() is None  # the daemon stays up


def _assert_refused_by(*daemons: DaemonProc) -> None:
    """:func:`_assert_refused` through each daemon, side by side (each refusal waits up to
    3 s for a connection: one after the other would take most of a lease)."""
    with ThreadPoolExecutor(len(daemons)) as pool:
        list(pool.map(_assert_refused, daemons))


def _resumes(d: DaemonProc, ran: Path, waiting: list[int]) -> float:
    """Seconds from now (the server just back) until a job added through ``d`` and every
    job of ``waiting`` have run."""
    back = time.monotonic()
    after = _add_until_accepted(d, f"echo after >> {ran}")
    wait_until(lambda: _succeeded(d, [after, *waiting]), timeout=RESUME_WITHIN + 10)
    return time.monotonic() - back


def test_a_clean_restart_keeps_the_daemons_up_and_the_running_command_alive(
    cluster: Cluster, server: PrivateServer, tmp_path: Path
) -> None:
    """One daemon runs a command that waits for a file; jobs are due during the outage;
    the server is stopped (``-m fast``) until that daemon's heartbeat has failed, then
    started again."""
    go, ran = tmp_path / "go", tmp_path / "ran.txt"
    a, b = _start(cluster, server, "a"), _start(cluster, server, "b")
    long = _add_until_accepted(a, f"while [ ! -e {go} ]; do sleep 0.05; done; echo long >> {ran}")
    pid = _pid_of(a, long)
    runs = _owner_of(long, a, b)
    due = [
        d.client().enqueue({"command": ["sh", "-c", f"echo {i} >> {ran}"], "cwd": "/",
                            "run_at": _in(1)})["id"]
        for i, d in enumerate((a, b, a, b))
    ]  # fmt: skip
    server.stop("fast")
    _assert_refused_by(a, b)
    runs.wait_for_line("event=heartbeat_failed", timeout=TTL)
    assert Path(f"/proc/{pid}").exists()  # its lease still holds: it keeps running
    server.start()
    took = _resumes(a, ran, due)
    assert took < RESUME_WITHIN + LOAD_SLACK, f"work resumed {took:.1f} s after the restart"
    runs.wait_for_line("event=heartbeat_recovered", timeout=TTL)
    assert Path(f"/proc/{pid}").exists()
    go.touch()
    wait_until(lambda: _succeeded(a, [long]), timeout=20)
    assert [x["outcome"] for x in a.client().get(long)["attempts"]] == ["succeeded"]
    assert Counter(ran.read_text().split()) == Counter(["long", "after", "0", "1", "2", "3"])
    for d in (a, b):
        assert d.client().status()["state"] == "ok"
        assert not any("event=leases_given_up" in x for x in d.log)
        # the database away is no full disk: the daemon's disk reserve was kept
        assert not any("event=disk_reserve_released" in x for x in d.log)
        assert d.db.with_name(d.db.name + ".reserve").exists()


def _owner_of(job_id: int, *daemons: DaemonProc) -> DaemonProc:
    """The daemon whose lease ``job_id`` runs under (its owner id holds its pid)."""
    owner = daemons[0].client().get(job_id)["lease_owner"]
    pid = int(owner.rsplit(":", 2)[1])
    return next(d for d in daemons if d.proc is not None and d.proc.pid == pid)


def test_a_crash_while_jobs_are_added_loses_nothing_acknowledged(
    cluster: Cluster, server: PrivateServer, tmp_path: Path
) -> None:
    """Two clients add keyed jobs through two daemons; the server crashes (``-m
    immediate``) in the middle and is started again: every acknowledged job runs, once
    (one refused may have committed before its answer was lost: it runs at most once)."""
    a, b = _start(cluster, server, "a"), _start(cluster, server, "b")
    ran = tmp_path / "ran.txt"
    acked: list[str] = []
    refused: list[str] = []
    stop = threading.Event()

    def add(d: DaemonProc, prefix: str) -> None:
        client, i = Client(d.socket), 0  # its own: the test's thread uses d.client()
        while not stop.is_set():
            key, i = f"{prefix}{i}", i + 1
            job = {"command": ["sh", "-c", f"echo {key} >> {ran}"], "cwd": "/", "key": key}
            try:
                client.enqueue(job)
            except JobctlError as exc:
                refused.append(exc.code)
                time.sleep(0.02)
                continue
            acked.append(key)
        client.close()

    adders = [threading.Thread(target=add, args=(d, p)) for d, p in ((a, "a"), (b, "b"))]
    for t in adders:
        t.start()
    try:
        wait_until(lambda: len(acked) >= 10, what="adds before the crash")
        server.stop("immediate")
        wait_until(lambda: len(refused) >= 2, what="adds refused while the server is down")
        _assert_refused_by(a, b)
        server.start()
        before = len(acked)
        took = _resumes(a, ran, [])
        wait_until(lambda: len(acked) >= before + 10, what="adds after the restart")
    finally:
        stop.set()
        for t in adders:
            t.join()
    assert took < RESUME_WITHIN + LOAD_SLACK, f"work resumed {took:.1f} s after the restart"
    assert set(refused) == {"store_unavailable"}

    def all_ran() -> bool:
        return ran.exists() and set(acked) <= set(ran.read_text().split())

    wait_until(all_ran, timeout=30, what="every acknowledged job to run")
    counts = Counter(ran.read_text().split())
    assert max(counts.values()) == 1, "a job ran twice"
    for d in (a, b):
        assert d.proc is not None and d.proc.poll() is None
        assert d.client().status()["state"] == "ok"
