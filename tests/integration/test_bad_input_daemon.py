"""Issue 11 items 6, 7 and 10 on the real daemon, over its socket: one client's bad input
is refused with a 422 and fails nothing of other clients' concurrent work."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from jobctl import errors
from jobctl.client import Client
from tests.integration.conftest import DaemonProc

POISONS: list[dict[str, Any]] = [
    {"command": ["true"], "timeout": 1e-9},  # used to fail the whole insert group (500s)
    {"command": ["echo", "a\0b"]},  # used to leave the job running forever
    {"command": ["true"], "env": {"A": "x\0"}},
    {"command": ["true"], "cwd": "/tmp\0"},
]


def test_bad_enqueues_fail_alone_among_concurrent_valid_ones(daemon: DaemonProc) -> None:
    per_client, clients = 40, 6
    created: list[int] = []
    failures: list[BaseException] = []
    refused: list[str] = []
    lock = threading.Lock()

    def valid(n: int) -> None:
        with Client(daemon.socket) as c:
            for i in range(per_client):
                try:
                    job = c.enqueue({"command": ["true"], "key": f"c{n}-{i}"})
                except BaseException as exc:
                    with lock:
                        failures.append(exc)
                    continue
                with lock:
                    created.append(job["id"])

    def poison() -> None:
        with Client(daemon.socket) as c:
            for i in range(per_client):
                try:
                    c.enqueue(POISONS[i % len(POISONS)])
                except errors.InvalidInput as exc:  # the 422 it must get
                    with lock:
                        refused.append(exc.message)
                except BaseException as exc:
                    with lock:
                        failures.append(exc)

    threads = [threading.Thread(target=valid, args=(n,)) for n in range(clients)]
    threads.append(threading.Thread(target=poison))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failures == []
    assert len(set(created)) == per_client * clients  # every valid enqueue committed
    assert len(refused) == per_client
    while not daemon.lines.empty():  # everything the daemon logged so far
        daemon.log.append(daemon.lines.get_nowait())
    assert not [line for line in daemon.log if "Traceback" in line or "status=500" in line]
    listed = daemon.client().list_jobs(limit=10_000)
    assert len(listed) == per_client * clients  # and nothing of the refused ones


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/v1/jobs/99999999999999999999", "job_id"),
        ("/v1/dlq/99999999999999999999", "job_id"),
    ],
)
def test_ids_out_of_range_are_422_on_the_daemon(
    module_daemon: DaemonProc, path: str, fragment: str
) -> None:
    with pytest.raises(errors.InvalidInput, match=fragment):  # a read: the daemon unchanged
        module_daemon.client().request("GET", path)
