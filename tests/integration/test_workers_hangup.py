"""A worker that stops or dies while its lease request waits is granted nothing
(docs/workers.md): the daemon reads the end of the connection's request stream (a
stopping worker half-closes it, a killed worker's is closed by the kernel), ends the
wait at once and leases nothing more. Before, the wait went on with nobody reading it:
the next job was leased to it, and lapsed at ``lease_until`` with an attempt used.

Real daemon, real ``jobctl worker`` processes, worker leases of 30 s: a lapse would
outlast every wait here. ``jobctl_lease_waits`` (the long-polls waiting now) says when
the poll is in the daemon."""

from __future__ import annotations

import json
import re
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import DaemonProc, wait_until
from tests.integration.test_workers_daemon import WorkerProc, workers  # noqa: F401
from tests.workers import app_tasks

LONG = ("--wait", "30", "--lease-ttl", "30", "--concurrency", "1", "--prefetch", "0")


def _waits(d: DaemonProc) -> int:
    text = d.client().request("GET", "/v1/metrics")
    m = re.search(r"^jobctl_lease_waits (\S+)$", text, re.MULTILINE)
    assert m is not None, "no jobctl_lease_waits in the metrics"
    return int(float(m[1]))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_worker_gone_mid_poll_is_leased_nothing(
    workers: Callable[..., WorkerProc],  # noqa: F811
    tmp_path: Path,
    sig: int,
) -> None:
    d: DaemonProc = workers.daemon  # type: ignore[attr-defined]
    a = workers(*LONG)
    wait_until(lambda: _waits(d) == 1, what="the worker's long-poll in the daemon")
    (a.proc.send_signal if sig == signal.SIGTERM else a.group)(sig)
    assert a.proc.wait(10) == (0 if sig == signal.SIGTERM else -sig)
    wait_until(lambda: _waits(d) == 0, what="the daemon to end the dead poll")
    out = tmp_path / "out"
    job_id = app_tasks.record.defer(path=str(out), n=1).job_id
    workers(*LONG)
    wait_until(lambda: d.client().get(job_id)["status"] == "succeeded", what="the run")
    assert [x["outcome"] for x in d.client().get(job_id)["attempts"]] == ["succeeded"]


def test_a_half_closed_long_poll_is_answered_at_once(daemon: DaemonProc) -> None:
    """The protocol under the worker: send the lease request, shut the sending side;
    the answer (no lease) comes at once, then the daemon closes (before: it closed
    without an answer, and the wait went on inside)."""
    app_tasks.app.socket = daemon.socket
    app_tasks.record.defer(path="/dev/null", n=0)  # makes "wq" a worker queue
    daemon.client().lease(["wq"], 1)  # take it: the next request must wait
    body = json.dumps({"queues": ["wq"], "max": 1, "wait": 30}).encode()
    head = (
        "POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(15)
        s.connect(str(daemon.socket))
        s.sendall(head.encode() + body)
        wait_until(lambda: _waits(daemon) == 1, what="the long-poll")
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    status, _, rest = got.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 200"), got
    assert json.loads(rest.partition(b"\r\n\r\n")[2]) == {"leases": []}
    assert _waits(daemon) == 0
