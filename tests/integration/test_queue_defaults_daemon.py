"""Per-queue defaults on a real daemon (issue 12): ``jobctl queues set`` gives a queue's
jobs resource limits and a failure notifier they do not give themselves; ``show`` says
the effective values and where they come from, ``queues list`` shows them, and limits
the daemon cannot apply are refused at ``queues set`` and ``schedules edit`` as ``add``
refuses them. The CLI runs in-process; the commands are real subprocesses."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from jobctl.cli.main import run
from tests.integration.conftest import DaemonProc
from tests.integration.hostusers import Users, group_args, host_users, request_as, shared_socket
from tests.integration.test_limits_daemon import NICE_OF_SELF
from tests.integration.test_notify_daemon import dead_job, notified

__all__ = ["host_users"]  # the fixture, used by name

NO_CGROUPS = {"JOBCTL_JOB_CGROUPS": "off"}


def cli(d: DaemonProc, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    argv = list(args)
    argv.insert(argv.index("--") if "--" in argv else len(argv), f"--socket={d.socket}")
    code = run(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_queues_nice_applies_to_its_jobs_without_their_own(
    daemon: DaemonProc, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(daemon, capsys, "queues", "set", "batch", "--nice", "7")[0] == 0
    c = daemon.client()
    bare = c.enqueue({"command": ["sh", "-c", NICE_OF_SELF], "cwd": "/", "queue": "batch"})["id"]
    own = c.enqueue(
        {"command": ["sh", "-c", NICE_OF_SELF], "cwd": "/", "queue": "batch", "nice": 3}
    )["id"]
    elsewhere = c.enqueue({"command": ["sh", "-c", NICE_OF_SELF], "cwd": "/"})["id"]
    for job_id in (bare, own, elsewhere):
        daemon.wait_for_line(f"event=succeeded job={job_id} ")
    ran = {j: c.get(j)["attempts"][0]["output_tail"].strip() for j in (bare, own, elsewhere)}
    assert ran == {bare: "7", own: "3", elsewhere: "0"}
    assert c.get(bare)["resources"] == {}  # the job keeps only its own
    assert c.get(bare)["effective"]["resources_from"] == {"nice": "queue batch"}
    assert "limits  nice 7 (queue batch)" in cli(daemon, capsys, "show", str(bare))[1]
    assert "limits  nice 3 (job)" in cli(daemon, capsys, "show", str(own))[1]
    listed = cli(daemon, capsys, "queues", "list")[1]
    assert "nice 7" in listed
    code, out, _ = cli(daemon, capsys, "queues", "set", "batch", "--clear-nice", "--json")
    assert code == 0 and json.loads(out)["resources"] == {}


def test_a_queues_notifier_runs_before_the_configs(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = tmp_path / "seen"
    env = {
        "JOBCTL_NOTIFY_ON_FAILURE": f"echo default >> {seen}",
        "JOBCTL_NOTIFY_QUEUES": json.dumps({"batch": f"echo config-queue >> {seen}"}),
    }
    d = make_daemon(env=env)
    line = f'echo "queue $JOBCTL_FAILED_JOB_ID $(id -u)" >> {seen}'
    assert cli(d, capsys, "queues", "set", "batch", "--on-failure", line)[0] == 0
    first = dead_job(d, tmp_path, queue="batch")
    notified(d, first)
    _, shown, _ = cli(d, capsys, "show", str(first))
    assert f"on failure  {line} (queue batch)" in shown
    own = dead_job(d, tmp_path, queue="batch", on_failure=f"echo own >> {seen}")
    notified(d, own)
    assert cli(d, capsys, "queues", "set", "batch", "--on-failure", "")[0] == 0
    after = dead_job(d, tmp_path, queue="batch")
    notified(d, after)
    assert seen.read_text().splitlines() == [f"queue {first} {os.getuid()}", "own", "config-queue"]
    assert d.client().get(after)["effective"]["on_failure_from"] == "config notify.queues.batch"


def test_limits_the_daemon_cannot_apply_are_refused_at_queues_set_and_schedules_edit(
    make_daemon: Callable[..., DaemonProc], capsys: pytest.CaptureFixture[str]
) -> None:
    d = make_daemon(env=NO_CGROUPS)
    code, _, add_err = cli(d, capsys, "add", "--memory-max", "512M", "--", "true")
    assert code != 0 and add_err.startswith("jobctl: error: --memory-max needs a cgroup")
    code, _, err = cli(d, capsys, "queues", "set", "batch", "--memory-max", "512M")
    assert (code, err) == (2, add_err)  # the same message as add's
    code, _, err = cli(d, capsys, "queues", "set", "batch", "--cpu-quota", "50%")
    assert code == 2 and err.startswith("jobctl: error: --cpu-quota needs a cgroup")
    assert d.client().queues() == []  # nothing stored
    assert cli(d, capsys, "add", "--cron", "0 7 * * *", "--name", "n", "--", "true")[0] == 0
    code, _, err = cli(d, capsys, "schedules", "edit", "n", "--memory-max", "512M")
    assert code == 2 and "--memory-max needs a cgroup" in err and err.count("\n") == 1
    assert "memory_max" not in d.client().schedule("n")["job"]
    assert cli(d, capsys, "schedules", "edit", "n", "--nice", "5")[0] == 0  # applicable
    assert d.client().schedule("n")["job"]["nice"] == 5
    assert cli(d, capsys, "schedules", "edit", "n", "--clear-nice")[0] == 0
    assert "nice" not in d.client().schedule("n")["job"]


def test_a_queues_notifier_runs_as_the_jobs_owner_and_only_admins_set_it(
    make_daemon: Callable[..., DaemonProc], host_users: Users
) -> None:
    d = make_daemon(*group_args(), start=False)
    d.socket = shared_socket()
    d.start()
    try:
        owner = host_users.owner
        status, refused = request_as(owner, d.socket, "PATCH", "/v1/queues/batch", {"nice": 1})
        assert status == 403 and refused["error"]["code"] == "forbidden"
        line = 'echo "$(id -u) $JOBCTL_FAILED_JOB_ID" > "$HOME/queue-notified"'
        d.client().set_queue("batch", {"on_failure": line})  # the daemon's user: an admin
        body = {"command": ["false"], "cwd": "/", "max_attempts": 1, "queue": "batch"}
        status, job = request_as(owner, d.socket, "POST", "/v1/jobs", body)
        assert status == 201, job
        [step] = notified(d, job["id"])["notified"]["steps"]
        assert step["exit_code"] == 0, step
        said = (Path(owner.home) / "queue-notified").read_text().split()
        assert said == [str(owner.uid), str(job["id"])]
    finally:
        d.stop()
        shutil.rmtree(d.socket.parent, ignore_errors=True)
