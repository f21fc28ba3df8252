"""Failure notification against a real daemon (issue 12: cron's MAILTO, systemd's
OnFailure=): the notifier runs once when a job ends dead, never on a failure that will be
retried, with the failed job in its environment, and mails through a fake ``sendmail``
(a real script on the job's PATH that records what it read). What it did shows in
``show``. The CLI runs in-process; the commands are real subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from jobctl.cli.main import run
from tests.integration.conftest import DaemonProc, wait_until
from tests.integration.hostusers import Users, group_args, host_users, request_as, shared_socket

__all__ = ["host_users"]  # the fixture, used by name

#: A sendmail that keeps its arguments and the message it was given, then exits 0.
FAKE_SENDMAIL = """#!/bin/sh
echo "$@" > "{out}.args"
cat > "{out}"
"""


def notified(daemon: DaemonProc, job_id: int) -> dict[str, Any]:
    c = daemon.client()
    wait_until(lambda: c.get(job_id).get("notified"), 30, f"job {job_id} notified")
    return c.get(job_id)


def dead_job(daemon: DaemonProc, tmp: Path, **extra: Any) -> int:
    body = {
        "command": ["sh", "-c", "echo start; echo boom-$((6*7)); exit 3"],
        "cwd": str(tmp),
        "max_attempts": 1,
        "env": {"PATH": f"{tmp / 'bin'}:/usr/bin:/bin"},
    } | extra
    return int(daemon.client().enqueue(body)["id"])


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    return tmp_path / "bin"


def test_a_dead_job_runs_its_notifier_once_with_the_failure_in_its_env(
    daemon: DaemonProc, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = tmp_path / "seen"
    line = (
        f'echo "$JOBCTL_FAILED_JOB_ID|$JOBCTL_FAILED_JOB_KEY|$JOBCTL_FAILED_EXIT_CODE|'
        f'$JOBCTL_FAILED_DEAD_REASON|$JOBCTL_FAILED_ATTEMPT|$(id -u)|$JOBCTL_FAILED_OUTPUT_TAIL"'
        f" >> {seen}; exit 4"
    )
    job_id = dead_job(daemon, tmp_path, key="nightly", on_failure=line)
    job = notified(daemon, job_id)
    assert job["status"] == "dead" and job["on_failure"] == line
    [step] = job["notified"]["steps"]
    assert step["via"] == "command" and step["exit_code"] == 4  # a failing notifier…
    got = seen.read_text().split("|")
    assert got[:6] == [str(job_id), "nightly", "3", "max_attempts", "1", str(os.getuid())]
    assert "start\nboom-42" in got[6]
    assert run(["show", str(job_id), "--socket", str(daemon.socket)]) == 0
    out = capsys.readouterr().out
    assert "on failure" in out and "command exit 4" in out
    # …is recorded and notifies nobody: one line, and the job's budget untouched
    assert seen.read_text().count("|nightly|") == 1
    assert job["attempt"] == 1 and job["failures"] == 1


def test_a_retried_failure_does_not_notify(daemon: DaemonProc, tmp_path: Path) -> None:
    seen, marker = tmp_path / "seen", tmp_path / "failed-once"
    script = f"test -e {marker} && exit 0; touch {marker}; exit 1"
    c = daemon.client()
    job_id = int(c.enqueue({
        "command": ["sh", "-c", script], "cwd": str(tmp_path), "max_attempts": 2,
        "backoff": {"base": 0, "cap": 0}, "on_failure": f"echo x >> {seen}",
    })["id"])  # fmt: skip
    wait_until(lambda: c.get(job_id)["status"] == "succeeded", 30, "the retry")
    # a job that then dies does notify, so the notifier above had every chance to run
    other = dead_job(daemon, tmp_path, on_failure=f"echo y >> {seen}")
    notified(daemon, other)
    assert seen.read_text() == "y\n"
    assert c.get(job_id)["notified"] is None


def test_mailto_sends_a_proper_mail_through_sendmail(
    daemon: DaemonProc, tmp_path: Path, bin_dir: Path
) -> None:
    mail = tmp_path / "mail"
    fake = bin_dir / "sendmail"
    fake.write_text(FAKE_SENDMAIL.format(out=mail))
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "MAILTO": "ops@example.com"}
    job_id = dead_job(daemon, tmp_path, key="backup-db", env=env)
    job = notified(daemon, job_id)
    [step] = job["notified"]["steps"]
    assert step == step | {"via": "mail", "to": "ops@example.com", "exit_code": 0}
    assert Path(f"{mail}.args").read_text().strip() == "-t"
    text = mail.read_text()
    head, _, body = text.partition("\n\n")
    assert "To: ops@example.com" in head
    assert f"Subject: jobctl: job {job_id} (backup-db) failed: max_attempts, exit code 3" in head
    assert "boom-42" in body and "Exit code: 3" in body


def test_an_empty_mailto_and_no_sendmail(daemon: DaemonProc, tmp_path: Path) -> None:
    quiet = dead_job(daemon, tmp_path, env={"MAILTO": ""}, on_failure="true")
    assert [s["via"] for s in notified(daemon, quiet)["notified"]["steps"]] == ["command"]
    lost = dead_job(daemon, tmp_path, env={"MAILTO": "a@b", "PATH": "/nonexistent"})
    [step] = notified(daemon, lost)["notified"]["steps"]
    if step["exit_code"] is None:  # no sendmail on this host: said, not hidden
        assert step["error"] == "no sendmail found"


def test_the_config_default_and_the_queues_notifier(make_daemon: Any, tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    env = {
        "JOBCTL_NOTIFY_ON_FAILURE": f'echo "default $JOBCTL_FAILED_JOB_ID" >> {seen}',
        "JOBCTL_NOTIFY_QUEUES": json.dumps(
            {"reports": f"echo reports $JOBCTL_FAILED_QUEUE >> {seen}"}
        ),
    }
    daemon = make_daemon(env=env)
    plain = dead_job(daemon, tmp_path)
    notified(daemon, plain)
    report = dead_job(daemon, tmp_path, queue="reports")
    notified(daemon, report)
    own = dead_job(daemon, tmp_path, queue="reports", on_failure=f"echo own >> {seen}")
    notified(daemon, own)
    assert seen.read_text().splitlines() == [f"default {plain}", "reports reports", "own"]


def test_a_schedule_and_its_edit_carry_the_notifier(
    daemon: DaemonProc, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sock = ["--socket", str(daemon.socket)]
    argv = ["add", "--cron", "0 7 * * *", "--name", "nightly", "--on-failure", "echo a", *sock]
    assert run([*argv, "--", "false"]) == 0
    c = daemon.client()
    assert c.schedule("nightly")["job"]["on_failure"] == "echo a"
    assert run(["schedules", "edit", "nightly", "--on-failure", "echo b", *sock]) == 0
    assert c.schedule("nightly")["job"]["on_failure"] == "echo b"
    assert run(["schedules", "edit", "nightly", "--on-failure", "", *sock]) == 0
    assert "on_failure" not in c.schedule("nightly")["job"]
    capsys.readouterr()


def test_the_notifier_runs_as_the_jobs_owner(
    make_daemon: Any, host_users: Users, tmp_path: Path
) -> None:
    d = make_daemon(*group_args(), start=False)
    d.socket = shared_socket()
    d.start()
    try:
        owner = host_users.owner
        line = 'echo "$(id -u) $JOBCTL_FAILED_JOB_ID" > "$HOME/notified"'
        body = {"command": ["false"], "cwd": "/", "max_attempts": 1, "on_failure": line}
        status, job = request_as(owner, d.socket, "POST", "/v1/jobs", body)
        assert status == 201, job
        done = notified(d, job["id"])
        [step] = done["notified"]["steps"]
        assert step["exit_code"] == 0, step
        said = (Path(owner.home) / "notified").read_text().split()
        assert said == [str(owner.uid), str(job["id"])]
    finally:
        d.stop()
        shutil.rmtree(d.socket.parent, ignore_errors=True)


def test_a_job_left_dead_by_start_up_recovery_is_notified(make_daemon: Any, tmp_path: Path) -> None:
    """kill -9 of the daemon during the job's last attempt: the restarted daemon reclaims
    it dead (lease_expired) and runs its notifier."""
    seen, started = tmp_path / "seen", tmp_path / "started"
    d = make_daemon()
    job_id = dead_job(
        d, tmp_path, command=["sh", "-c", f"touch {started}; exec sleep 60"],
        on_failure=f'echo "$JOBCTL_FAILED_DEAD_REASON" > {seen}',
    )  # fmt: skip
    wait_until(started.exists, 20, "the attempt to start")
    d.signal(signal.SIGKILL)
    d.wait()
    d2 = make_daemon()
    [step] = notified(d2, job_id)["notified"]["steps"]
    assert step["exit_code"] == 0 and seen.read_text() == "lease_expired\n"
