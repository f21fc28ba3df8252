"""Resource limits on a real daemon: --nice applied before the command runs, shown by
``show``; --memory-max/--cpu-quota written to the attempt's cgroup where the daemon has
the controller, else refused at enqueue with the reason (never run without them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import DaemonProc, daemon_env

NICE_OF_SELF = "cut -d' ' -f19 /proc/self/stat"  # field 19 of stat: the niceness


def cli(d: DaemonProc, *args: str) -> subprocess.CompletedProcess[str]:
    env = daemon_env() | {"JOBCTL_SOCKET": str(d.socket)}
    return subprocess.run([sys.executable, "-m", "jobctl", *args], env=env, capture_output=True,
                          text=True, timeout=60, cwd="/")  # fmt: skip


@pytest.mark.parametrize("spawner", ["helper", "inline"])
def test_nice_is_set_before_the_command_runs_and_shown(
    make_daemon: Callable[..., DaemonProc], spawner: str
) -> None:
    d = make_daemon(env={"JOBCTL_JOB_SPAWNER": spawner})
    job_id = d.client().enqueue({"command": ["sh", "-c", NICE_OF_SELF], "cwd": "/", "nice": 7})[
        "id"
    ]
    d.wait_for_line(f"event=succeeded job={job_id} ")
    job = d.client().get(job_id)
    assert job["resources"] == {"nice": 7}
    assert job["attempts"][0]["output_tail"].strip() == "7"
    shown = cli(d, "show", str(job_id)).stdout
    assert "limits  nice 7" in shown


def test_memory_and_cpu_limits_are_applied_or_refused_with_the_reason(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    d = make_daemon()
    add = cli(d, "add", "--json", "--memory-max", "512M", "--cpu-quota", "50%", "--",
              "sh", "-c", "cat /proc/self/cgroup")  # fmt: skip
    if add.returncode != 0:  # this host's cgroup v2 has no memory controller for us
        assert add.stderr.startswith("jobctl: error: --cpu-quota needs") or add.stderr.startswith(
            "jobctl: error: --memory-max needs"
        ), add.stderr
        assert "cgroup v2" in add.stderr and "Traceback" not in add.stderr
        assert d.client().status()["counts"].get("scheduled", 0) == 0  # nothing stored
        return
    job_id = json.loads(add.stdout)["id"]
    d.wait_for_line(f"event=succeeded job={job_id} ")
    job = d.client().get(job_id)
    assert job["resources"] == {"memory_max": 512 << 20, "cpu_quota": 50.0}
    cg = job["attempts"][0]["output_tail"].strip().split("::", 1)[1]
    assert cg.rsplit("/", 1)[-1].endswith(f".{job_id}.1")


def test_a_negative_nice_needs_a_root_daemon_or_is_applied(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    d = make_daemon()
    out = cli(d, "add", "--json", "--nice", "-5", "--", "sh", "-c", NICE_OF_SELF)
    if os.geteuid() != 0:
        assert "needs a root daemon" in out.stderr
        return
    job_id = json.loads(out.stdout)["id"]
    d.wait_for_line(f"event=succeeded job={job_id} ")
    assert d.client().get(job_id)["attempts"][0]["output_tail"].strip() == "-5"
