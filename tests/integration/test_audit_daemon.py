"""The audit trail through a real daemon: real peer credentials, the log line, the CLI."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import DaemonProc, daemon_env
from tests.integration.hostusers import remove_leftovers, tagged
from tests.integration.test_daemon import cli

USER = tagged("aud")  # per process: two runs at once deleted each other's user


def test_jobctl_audit_shows_who_did_what(daemon: DaemonProc) -> None:
    assert cli(daemon, "add", "--", "true").returncode == 0
    paused = cli(daemon, "queues", "pause", "mail")
    assert paused.returncode == 0, paused.stderr
    line = daemon.wait_for_line("action=queues.pause")
    assert f"uid={os.geteuid()} gid={os.getegid()} " in line and "target=queue:mail" in line

    out = cli(daemon, "audit", "--json")
    assert out.returncode == 0, out.stderr
    records = json.loads(out.stdout)["items"]
    assert [r["action"] for r in records] == ["queues.pause", "jobs.enqueue"]
    pause = records[0]
    assert (pause["uid"], pause["gid"], pause["target"], pause["status"]) == (
        os.geteuid(),
        os.getegid(),
        "queue:mail",
        200,
    )
    assert pause["pid"] > 0 and pause["pid"] != daemon.proc.pid  # type: ignore[union-attr]
    assert pause["request_id"] in line

    table = cli(daemon, "audit", "--action", "queues")
    assert table.returncode == 0, table.stderr
    assert "queues.pause" in table.stdout and "queue:mail" in table.stdout
    assert "jobs.enqueue" not in table.stdout and "REQUEST" in table.stdout


def test_a_secrets_target_is_a_secret_not_a_queue(daemon: DaemonProc) -> None:
    """``/v1/secrets/{name}`` shares its parameter's name with the queue routes: the
    audit trail read ``secrets.rotate queue:hooks``."""
    for argv in (("create", "hooks"), ("rotate", "hooks"), ("delete", "hooks")):
        done = cli(daemon, "secrets", *argv)
        assert done.returncode == 0, done.stderr
    records = json.loads(cli(daemon, "audit", "--action", "secrets", "--json").stdout)["items"]
    assert [(r["action"], r["target"]) for r in records] == [
        ("secrets.delete", "secret:hooks"),
        ("secrets.rotate", "secret:hooks"),
        ("secrets.create", "secret:hooks"),
    ]


@pytest.fixture(scope="session")
def other_user() -> Iterator[pwd.struct_passwd]:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to create a second user")
    remove_leftovers(USER)
    subprocess.run(["useradd", "--no-create-home", "--user-group", USER], check=True)
    try:
        yield pwd.getpwnam(USER)
    finally:
        subprocess.run(["userdel", USER], capture_output=True)


@pytest.fixture
def shared_daemon(other_user: pwd.struct_passwd) -> Iterator[DaemonProc]:
    """A root daemon whose socket the other user's group may use (a shared host)."""
    base = Path(tempfile.mkdtemp(prefix="jctaudit-", dir="/tmp"))
    base.chmod(0o755)  # the other user must reach the socket below it
    d = DaemonProc(base, "--socket-group", USER).start()
    try:
        yield d
    finally:
        d.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_a_non_admin_is_refused_and_the_refusal_recorded(
    shared_daemon: DaemonProc, other_user: pwd.struct_passwd
) -> None:
    as_user = subprocess.run(
        ["setpriv", f"--reuid={other_user.pw_uid}", f"--regid={other_user.pw_gid}",
         "--clear-groups", sys.executable, "-m", "jobctl", "audit"],
        capture_output=True, text=True, timeout=60, cwd="/",
        env=daemon_env() | {"JOBCTL_SOCKET": str(shared_daemon.socket)},
    )  # fmt: skip
    assert as_user.returncode == 77, as_user.stderr
    assert as_user.stderr == "jobctl: error: only admins may read the audit trail\n"

    out = cli(shared_daemon, "audit", "--json", "--uid", str(other_user.pw_uid))
    assert out.returncode == 0, out.stderr
    (record,) = json.loads(out.stdout)["items"]
    assert (record["uid"], record["gid"], record["action"]) == (
        other_user.pw_uid,
        other_user.pw_gid,
        "audit.read",
    )
    assert (record["status"], record["error"], record["denied"]) == (403, "forbidden", True)
