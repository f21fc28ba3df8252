"""A root daemon runs each command as its owner: privileges dropped first (group, the
owner's supplementary groups, uid), then the working directory entered *as the owner*,
with umask 077. Needs root and real users (CI runs as root); skipped elsewhere."""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.integration.conftest import DaemonProc, wait_until
from tests.integration.hostusers import Users, group_args, host_users, request_as, shared_socket

__all__ = ["host_users"]  # the fixture, used by name
FIELDS = "Uid|Gid|Groups|Umask"


@pytest.fixture
def root_daemon(make_daemon: Callable[..., DaemonProc], host_users: Users) -> Iterator[DaemonProc]:
    d = make_daemon(*group_args(), start=False)
    d.socket = shared_socket()
    yield d.start()
    d.stop()
    shutil.rmtree(d.socket.parent, ignore_errors=True)


def _run_as(d: DaemonProc, users: Users, job: dict[str, Any]) -> dict[str, Any]:
    status, body = request_as(users.owner, d.socket, "POST", "/v1/jobs", job)
    assert status == 201, body
    client = d.client()
    final = {"succeeded", "dead", "cancelled"}
    wait_until(lambda: client.get(body["id"])["status"] in final, 20, "the job to end")
    return client.get(body["id"])


@pytest.mark.parametrize("where", ["other user's 0700 home", "the daemon's log directory"])
def test_a_directory_the_owner_cannot_enter_fails_clearly_and_nothing_runs_there(
    root_daemon: DaemonProc, host_users: Users, where: str
) -> None:
    """Today's main entered it as root, then ran the command there as the owner."""
    cwd = host_users.other.home if where.startswith("other") else root_daemon.db.parent / "logs"
    job = _run_as(
        root_daemon,
        host_users,
        {"command": ["/bin/sh", "-c", "echo ran; pwd"], "cwd": str(cwd), "max_attempts": 3},
    )
    assert job["status"] == "dead" and job["dead_reason"] == "non_retryable"
    [attempt] = job["attempts"]
    owner = host_users.owner
    assert attempt["error"] == (
        f"cannot start: uid {owner.uid} ({owner.name}) cannot enter the working directory "
        f"{cwd}: permission denied"
    )
    assert "ran" not in attempt["output_tail"]


def test_a_missing_directory_fails_clearly(root_daemon: DaemonProc, host_users: Users) -> None:
    # a fixed name (/nonexistent) can exist on a host; under / the owner may look for it
    gone = f"/nonexistent-{secrets.token_hex(8)}/dir"
    job = _run_as(root_daemon, host_users, {"command": ["true"], "cwd": str(gone)})
    assert job["status"] == "dead"
    assert job["attempts"][0]["error"] == f"cannot start: no such working directory {gone}"
    assert job["attempts"][0]["exit_code"] == 127


def test_the_command_has_exactly_the_owners_ids_groups_and_umask(
    root_daemon: DaemonProc, host_users: Users
) -> None:
    owner = host_users.owner
    job = _run_as(
        root_daemon,
        host_users,
        {
            "command": [
                "/bin/sh",
                "-c",
                "grep -E '^(Uid|Gid|Groups|Umask)' /proc/self/status; pwd",
            ],
            "cwd": str(owner.home),
        },
    )
    assert job["status"] == "succeeded", job
    lines = dict(
        line.split(":", 1) for line in job["attempts"][0]["output_tail"].splitlines() if ":" in line
    )
    assert lines["Uid"].split() == [str(owner.uid)] * 4
    assert lines["Gid"].split() == [str(owner.gid)] * 4
    assert sorted(map(int, lines["Groups"].split())) == sorted(set(owner.groups()))
    assert 0 not in map(int, lines["Groups"].split())
    assert len(owner.groups()) >= 3  # its own group and the two supplementary ones
    assert lines["Umask"].strip() == "0077"
    assert job["attempts"][0]["output_tail"].rstrip().endswith(str(owner.home))


def test_the_environment_is_the_jobs_own(root_daemon: DaemonProc, host_users: Users) -> None:
    """The trampoline's shell changes nothing the command sees: no PWD or OLDPWD unless
    the job gave them, and those as given."""
    job = _run_as(
        root_daemon,
        host_users,
        {"command": ["env"], "cwd": "/tmp", "env": {"OLDPWD": "/given"}},
    )
    env = dict(line.split("=", 1) for line in job["attempts"][0]["output_tail"].splitlines())
    assert env["OLDPWD"] == "/given" and "PWD" not in env
    assert env["USER"] == host_users.owner.name
