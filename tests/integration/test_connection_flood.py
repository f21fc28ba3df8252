"""Robustness: one user opens 1,100 idle connections to a daemon held to 1,024 open
files; root's ``status`` keeps answering and no job dies of EMFILE.

Today's main, the same way: ``status`` failed 13 of 16 times and jobs that came due
died at once as ``non_retryable`` ("Too many open files"). Needs root and real users
(the hog must be another uid than the one asking for status); skipped elsewhere.
"""

from __future__ import annotations

import resource
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from tests.integration.conftest import DaemonProc, wait_until
from tests.integration.hostusers import (
    SYSTEM_PYTHON,
    Users,
    group_args,
    host_users,
    shared_socket,
)

__all__ = ["host_users"]

HOG = r"""
import resource, socket, sys
path, n = sys.argv[1], int(sys.argv[2])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # checked >= 1,200 by the test
held, failed = [], 0
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    try:
        s.connect(path)
    except OSError:
        failed += 1
    held.append(s)
print(f"connected {n - failed} failed {failed}", flush=True)
sys.stdin.read()  # hold every connection until the test closes stdin
"""


@pytest.fixture
def flooded(
    make_daemon: Callable[..., DaemonProc], host_users: Users
) -> Iterator[tuple[DaemonProc, subprocess.Popen[str]]]:
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 1200:
        pytest.skip("the hog needs an open-file hard limit of 1,200 or more")
    d = make_daemon(*group_args(), "--concurrency", "32", start=False)
    d.prefix = ["prlimit", "--nofile=1024:1024", "--"]
    d.socket = shared_socket()
    d.start()
    owner = host_users.owner
    hog = subprocess.Popen(
        [SYSTEM_PYTHON, "-c", HOG, str(d.socket), "1100"],
        user=owner.uid,
        group=owner.gid,
        extra_groups=owner.groups(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    assert hog.stdout is not None
    print(hog.stdout.readline().strip())  # every connection was attempted, all still held
    yield d, hog
    assert hog.stdin is not None
    hog.stdin.close()
    hog.wait(10)
    hog.stdout.close()
    d.stop()
    shutil.rmtree(d.socket.parent, ignore_errors=True)


def test_status_answers_and_no_job_dies_while_one_user_holds_1100_connections(
    flooded: tuple[DaemonProc, subprocess.Popen[str]],
) -> None:
    d, hog = flooded
    assert hog.poll() is None
    client = d.client()
    jobs = client.enqueue_many([{"command": ["true"], "cwd": "/"}] * 100)
    latencies = []
    for _ in range(16):
        t0 = time.perf_counter()
        assert client.status()["pid"]
        latencies.append(time.perf_counter() - t0)
    ids = [j["id"] for j in jobs]
    wait_until(
        lambda: all(j["status"] in {"succeeded", "dead"} for j in client.list_jobs(limit=200)),
        60,
        "every job to end",
    )
    done = [client.get(i) for i in ids]
    assert [j["id"] for j in done if j["status"] != "succeeded"] == []
    assert all("Too many open files" not in (a["error"] or "") for j in done for a in j["attempts"])
    d.wait_for_line("event=connection_refused")
    print(
        f"status during the flood: 16/16 answered, p50 {statistics.median(latencies) * 1000:.1f}"
        f" ms, max {max(latencies) * 1000:.1f} ms"
    )
