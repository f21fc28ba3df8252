"""Safety of daemons sharing PostgreSQL when a daemon loses the database or dies: real
daemons on a database ``jobctl_h15b_…``, one pointed through a TCP proxy the test cuts.

- a daemon cut off from the database stops its commands before their leases run out
  (so before another daemon may reclaim them), says so in one log line, and carries on
  when the database comes back;
- a daemon killed with ``kill -9`` and restarted stops the commands it left running whose
  jobs another daemon reclaimed meanwhile, and leaves the live daemon's alone;
- the database URL's password is shown masked (GET /v1/config, status).

Skips without a server (fails under ``JOBCTL_REQUIRE_POSTGRES=1``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.contract.conftest import PG_DSN, pg_database
from tests.integration.conftest import DaemonProc, wait_until
from tests.integration.tcpcut import TcpCut
from tests.integration.test_daemon import cli

pytestmark = pytest.mark.postgres
#: The first attempt runs long; the next ones end at once.
LONG_FIRST = 'if [ "$JOBCTL_ATTEMPT" = 1 ]; then sleep 60; else echo again; fi'
PASSWORD = "s3cret-h15b"


@pytest.fixture
def dbname() -> Iterator[str]:
    yield from pg_database("jobctl_h15b_")


@pytest.fixture
def proxy() -> Iterator[TcpCut]:
    server = urlsplit(PG_DSN)
    cut = TcpCut((server.hostname or "127.0.0.1", server.port or 5432))
    yield cut
    cut.close()


def url(dbname: str, port: int | None = None) -> str:
    """The database's URL, with a password (the server trusts: any is taken), directly
    or through the proxy on ``port``."""
    server = urlsplit(PG_DSN)
    where = f"{server.hostname}:{port or server.port or 5432}"
    return urlunsplit(server._replace(netloc=f"postgres:{PASSWORD}@{where}", path="/" + dbname))


@pytest.fixture
def cluster(tmp_path: Path, dbname: str, proxy: TcpCut) -> Iterator[Callable[..., DaemonProc]]:
    """Starts daemons; they are stopped before the proxy and the database go."""
    made: list[DaemonProc] = []

    def start(name: str, db: str) -> DaemonProc:
        home = tmp_path / name
        d = DaemonProc(
            home,
            "--state-dir", str(home / "state"),
            "--lease-ttl", "3",
            "--kill-grace", "1",
            "--shutdown-grace", "1",
            "--concurrency", "4",
        )  # fmt: skip
        d.db_arg = db
        made.append(d)
        return d.start()

    yield start
    for d in made:
        d.stop()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def lease_of(dbname: str, job_id: int) -> tuple[str, int]:
    """The job's status and lease end (ms), read past the proxy."""
    import psycopg

    with psycopg.connect(url(dbname), connect_timeout=5) as conn:
        row = conn.execute("SELECT status, lease_until FROM jobs WHERE id = %s", (job_id,))
        status, until = row.fetchone() or ("gone", 0)
    return str(status), int(until or 0)


def first_pid(d: DaemonProc, job_id: int) -> int:
    pid: list[int] = []

    def recorded() -> bool:
        attempts = d.client().get(job_id)["attempts"]
        if attempts and attempts[0]["pid"]:
            pid.append(attempts[0]["pid"])
        return bool(pid)

    wait_until(recorded, timeout=10, what="the attempt's pid")
    return pid[0]


def test_a_daemon_cut_off_stops_its_command_before_its_lease_ends_then_carries_on(
    cluster: Callable[..., DaemonProc], proxy: TcpCut, dbname: str
) -> None:
    a = cluster("a", url(dbname, proxy.port))
    shown = json.dumps(a.client().config())
    assert PASSWORD not in shown and f"postgres:***@127.0.0.1:{proxy.port}/{dbname}" in shown
    assert PASSWORD not in cli(a, "status").stdout + "".join(a.log)
    job = a.client().enqueue(
        {"command": ["sh", "-c", LONG_FIRST], "cwd": "/", "max_attempts": 3, "backoff": {"base": 0}}
    )
    a.wait_for_line(f"event=started job={job['id']} ")
    pid = first_pid(a, job["id"])
    try:
        proxy.cut()
        line = a.wait_for_line("event=leases_given_up", timeout=10)
        assert f"jobs={job['id']} " in line
        wait_until(lambda: not alive(pid), timeout=5, what="the command to be stopped")
        stopped_at_ms = time.time() * 1000
        status, lease_until = lease_of(dbname, job["id"])
        assert status == "running"  # nobody could reclaim it yet: its lease still holds
        assert stopped_at_ms < lease_until, "stopped after its lease ran out"
        assert a.proc is not None and a.proc.poll() is None  # the daemon stays up
        proxy.mend()
        wait_until(
            lambda: a.client().get(job["id"])["status"] == "succeeded",
            timeout=30,
            what="the job to run again once the database is back",
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    done = a.client().get(job["id"])
    assert done["attempts"][0]["outcome"] in {"interrupted", "lease_expired"}
    assert done["attempts"][-1]["outcome"] == "succeeded"
    assert sum("event=leases_given_up" in x for x in a.log) == 1  # one line said it
    again = a.client().enqueue({"command": ["true"], "cwd": "/"})
    wait_until(lambda: a.client().get(again["id"])["status"] == "succeeded", timeout=10)


def test_a_restarted_daemon_stops_the_commands_whose_jobs_were_reclaimed_elsewhere(
    cluster: Callable[..., DaemonProc], dbname: str
) -> None:
    """``kill -9`` of B while it runs a job; A reclaims it (lease expired) and runs it
    again; B's command survived all along. B restarted: that survivor is stopped, and
    the command A runs is left alone."""
    b = cluster("b", url(dbname))
    job = b.client().enqueue(
        {"command": ["sh", "-c", LONG_FIRST], "cwd": "/", "max_attempts": 2, "backoff": {"base": 0}}
    )
    b.wait_for_line(f"event=started job={job['id']} ")
    survivor = first_pid(b, job["id"])
    a = cluster("a", url(dbname))
    others: list[int] = []
    try:
        b.signal(signal.SIGKILL)
        b.wait()
        wait_until(lambda: a.client().get(job["id"])["status"] == "succeeded", timeout=30)
        outcomes = [x["outcome"] for x in a.client().get(job["id"])["attempts"]]
        assert outcomes == ["lease_expired", "succeeded"]
        assert alive(survivor)  # B's host was gone: nobody could stop it
        own = a.client().enqueue({"command": ["sleep", "60"], "cwd": "/"})
        a.wait_for_line(f"event=started job={own['id']} ")
        others.append(first_pid(a, own["id"]))
        b.start()
        line = b.wait_for_line(f"event=stopping_survivor job={job['id']} ", timeout=10)
        assert "reason=reclaimed_elsewhere" in line and str(survivor) in line
        wait_until(lambda: not alive(survivor), timeout=5, what="the survivor to stop")
        assert alive(others[0]) and a.client().get(own["id"])["status"] == "running"
        a.client().cancel(own["id"])
    finally:
        for pid in (survivor, *others):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
