"""A job's whole process tree is stopped on every path: cancel, timeout, daemon stop.

The job leaves two helpers outside its process group: one started with ``setsid`` and
one double-forked into a session of its own (a daemonized child). Both mechanisms are
run: the attempt's cgroup (skipped where this host gives none) and the ``/proc`` scan
by environment markers (``job_cgroups = "off"``).
"""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from jobctl.engine import cgroup, process
from tests.integration.conftest import DaemonProc, wait_until

# setsid helper; double fork (the subshell exits, its setsid child's sleep is orphaned);
# then the command itself sleeps. Three sleeps in all, two of them outside the group.
SCRIPT = "setsid sleep 1000 & ( setsid sh -c 'sleep 1001 & exit 0' & ); exec sleep 1002"

MECHANISMS = ["cgroup", "proc"]


def _start(make: Callable[..., DaemonProc], mechanism: str, *args: str) -> tuple[DaemonProc, str]:
    if mechanism == "cgroup" and cgroup.detect("auto")[0] is None:
        pytest.skip(f"no writable cgroup v2 here: {cgroup.detect('auto')[1]}")
    env = {"JOBCTL_JOB_CGROUPS": "auto" if mechanism == "cgroup" else "off"}
    d = make(*args, env=env)
    tracking = d.wait_for_line("event=process_tracking")
    assert f"mechanism={mechanism}" in tracking
    owner = re.search(r"event=ready .*owner=(\S+)", "".join(d.log))
    assert owner is not None
    return d, owner.group(1)


def _tree(job_id: int, owner: str) -> list[int]:
    """Live processes of the job (by the markers every process of it carries)."""
    pids = process.find_by_env({"JOBCTL_JOB_ID": str(job_id), "JOBCTL_LEASE_OWNER": owner})
    return [p for p in pids if _alive(p)]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _sleeps(job_id: int, owner: str) -> int:
    count = 0
    for pid in _tree(job_id, owner):
        with contextlib.suppress(OSError):
            count += Path(f"/proc/{pid}/comm").read_text().strip() == "sleep"
    return count


def _run_job(d: DaemonProc, owner: str, **extra: object) -> int:
    job_id = int(d.client().enqueue({"command": ["sh", "-c", SCRIPT], **extra})["id"])
    wait_until(lambda: _sleeps(job_id, owner) == 3, timeout=20, what="the job's three sleeps")
    return job_id


def _cgroup_gone(owner: str, job_id: int) -> bool:
    """No cgroup of the daemon's holds a process: the attempt's (named after it, or a
    slot of the spawn helper's pool, which stays, empty, for the next attempt) is empty."""
    found = cgroup.detect("auto")[0]
    assert found is not None
    mine = list(found.base.glob(f"{cgroup.owner_prefix(owner)}*"))
    return not any(cgroup.Cgroup(p).populated() for p in mine)


def _assert_all_stopped(mechanism: str, owner: str, job_id: int) -> None:
    wait_until(lambda: not _tree(job_id, owner), timeout=10, what="no process of the job left")
    if mechanism == "cgroup":
        wait_until(lambda: _cgroup_gone(owner, job_id), timeout=10, what="cgroup removed")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_cancel_stops_helpers_that_left_the_group(
    make_daemon: Callable[..., DaemonProc], mechanism: str
) -> None:
    d, owner = _start(make_daemon, mechanism)
    job_id = _run_job(d, owner)
    d.client().cancel(job_id)
    d.wait_for_line(f"job={job_id} ")
    _assert_all_stopped(mechanism, owner, job_id)
    assert d.client().get(job_id)["status"] == "cancelled"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_timeout_stops_helpers_that_left_the_group(
    make_daemon: Callable[..., DaemonProc], mechanism: str
) -> None:
    d, owner = _start(make_daemon, mechanism)
    job_id = _run_job(d, owner, timeout=1, max_attempts=1)
    d.wait_for_line(f"event=dead job={job_id} ")
    _assert_all_stopped(mechanism, owner, job_id)
    assert d.client().get(job_id)["attempts"][0]["outcome"] == "timeout"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_graceful_daemon_stop_stops_helpers_that_left_the_group(
    make_daemon: Callable[..., DaemonProc], mechanism: str
) -> None:
    d, owner = _start(make_daemon, mechanism, "--shutdown-grace", "0.2", "--kill-grace", "0.5")
    job_id = _run_job(d, owner)
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
    _assert_all_stopped(mechanism, owner, job_id)


def test_helpers_of_a_job_that_ended_on_its_own_are_killed_with_its_cgroup(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    d, owner = _start(make_daemon, "cgroup")
    job_id = int(
        d.client().enqueue({"command": ["sh", "-c", "setsid sleep 1000 & echo $! "]})["id"]
    )
    d.wait_for_line(f"event=succeeded job={job_id} ")
    _assert_all_stopped("cgroup", owner, job_id)
