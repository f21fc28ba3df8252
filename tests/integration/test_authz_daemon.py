"""Authorization end to end: a root daemon, real Unix users, its real socket.

Three users are created for the session (root only; skipped elsewhere), named per
process (``jcth<pid>zow``, see tests/integration/hostusers.py): the owner, another user
and a member of the admin group, all in the socket's group. Each talks to the daemon
from its own process, which drops to that user before it connects, so the daemon sees
the user's real peer credentials. The isolation matrix (tests/authz_matrix.py: owner,
other user, admin x every route) runs over that.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from jobctl.cli.main import run
from tests.authz_matrix import ADMIN, OTHER, OWNER, run_matrix
from tests.integration.conftest import DaemonProc
from tests.integration.hostusers import remove_leftovers, tagged

SOCKET_GROUP, ADMIN_GROUP = tagged("zsk"), tagged("zag")
USERS = {OWNER: tagged("zow"), OTHER: tagged("zot"), ADMIN: tagged("zad")}

#: Runs as root, imports what it needs, drops to the user (groups, gid, uid), then answers
#: one request per stdin line: [method, path, body] -> [status, data]. The interpreter
#: lives under /root, which the users cannot read: nothing may be imported after the drop.
_LATER = "2099-01-01T00:00:00Z"
HELPER = r"""
import http.client, json, os, socket, sys
uid, gid, groups, path = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
os.setgroups(groups); os.setgid(gid); os.setuid(uid)
assert os.getuid() == uid and os.geteuid() == uid
class Conn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
for line in sys.stdin:
    method, target, body = json.loads(line)
    conn = Conn("jobctl")
    data = None if body is None else json.dumps(body).encode()
    conn.request(method, target, body=data, headers={"content-type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read().decode("utf-8", "replace")
    kind = resp.getheader("content-type", "")
    conn.close()
    out = json.loads(raw) if kind.startswith("application/json") else raw
    sys.stdout.write(json.dumps([resp.status, out]) + "\n")
    sys.stdout.flush()
"""


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def _remove(users: dict[str, str]) -> None:
    for name in users.values():
        subprocess.run(["userdel", name], capture_output=True)
    for group in (SOCKET_GROUP, ADMIN_GROUP):
        subprocess.run(["groupdel", group], capture_output=True)


@pytest.fixture(scope="session")
def unix_users() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("needs root (creates Unix users and runs a root daemon)")
    if not all(shutil.which(t) for t in ("useradd", "userdel", "groupadd", "groupdel")):
        pytest.skip("useradd/groupadd not available")
    remove_leftovers(*USERS.values(), SOCKET_GROUP, ADMIN_GROUP)  # of interrupted runs
    _run("groupadd", SOCKET_GROUP)
    _run("groupadd", ADMIN_GROUP)
    try:
        for role, name in USERS.items():
            groups = SOCKET_GROUP + (f",{ADMIN_GROUP}" if role == ADMIN else "")
            _run("useradd", "--no-create-home", "--shell", "/bin/sh", "-G", groups, name)
        yield USERS
    finally:
        _remove(USERS)


class Peer:
    """One user's long-lived client process."""

    def __init__(self, name: str, socket_path: Path) -> None:
        pw = pwd.getpwnam(name)
        groups = os.getgrouplist(name, pw.pw_gid)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HELPER, str(pw.pw_uid), str(pw.pw_gid), json.dumps(groups),
             str(socket_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )  # fmt: skip

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        stdin: IO[str] | None = self.proc.stdin
        stdout: IO[str] | None = self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps([method, path, body]) + "\n")
        stdin.flush()
        line = stdout.readline()
        assert line, f"client process died: {self.proc.wait()}"
        status, data = json.loads(line)
        return int(status), data

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()


@pytest.fixture
def shared(unix_users: dict[str, str]) -> Iterator[tuple[DaemonProc, dict[str, Peer], Path]]:
    base = Path(tempfile.mkdtemp(prefix="jct-authz-"))
    base.chmod(0o755)  # the users must reach the socket below it (the socket is 0660)
    env = {
        "JOBCTL_ADMIN_GROUP": ADMIN_GROUP,
        "JOBCTL_ALLOW_FILE": str(base / "jobctl.allow"),
        "JOBCTL_DENY_FILE": str(base / "jobctl.deny"),
    }
    daemon = DaemonProc(base, "--socket-group", SOCKET_GROUP, env=env).start()
    peers = {role: Peer(name, daemon.socket) for role, name in unix_users.items()}
    try:
        yield daemon, peers, base
    finally:
        for p in peers.values():
            p.close()
        daemon.stop()
        shutil.rmtree(base, ignore_errors=True)


def _poll(peer: Peer, path: str, until: Any, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        status, data = peer.request("GET", path)
        if status == 200 and until(data):
            return data
        assert time.monotonic() < deadline, f"{path}: {status} {data}"
        time.sleep(0.02)  # the daemon runs a real command: nothing to wait on but its answer


async def test_the_isolation_matrix_over_the_socket(
    shared: tuple[DaemonProc, dict[str, Peer], Path],
) -> None:
    _, peers, _ = shared

    async def call(role: str, method: str, path: str, body: Any) -> tuple[int, Any]:
        return peers[role].request(method, path, body)

    async def dead_job() -> int:
        body = {"command": ["false"], "max_attempts": 1}
        status, job = peers[OWNER].request("POST", "/v1/jobs", body)
        assert status == 201 and job["owner_uid"] == pwd.getpwnam(USERS[OWNER]).pw_uid
        _poll(peers[OWNER], f"/v1/jobs/{job['id']}", lambda j: j["status"] == "dead")
        return int(job["id"])

    await run_matrix(call, dead_job)
    assert grp.getgrnam(SOCKET_GROUP)  # the users reached the socket through its group


def test_the_cli_passes_all_users(
    shared: tuple[DaemonProc, dict[str, Peer], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Root (an admin) with the CLI: its own by default, everyone's with --all-users."""
    daemon, peers, _ = shared
    status, job = peers[OWNER].request("POST", "/v1/jobs", {"command": ["true"], "run_at": _LATER})
    assert status == 201
    _, sched = peers[OWNER].request(
        "POST", "/v1/schedules", {"every": 3600, "job": {"command": ["true"]}}
    )
    sock = str(daemon.socket)
    for argv, key, theirs in (
        (["list"], "id", job["id"]),
        (["schedules", "list"], "id", sched["id"]),
    ):
        assert run([*argv, "--json", "--socket", sock]) == 0
        assert theirs not in {x[key] for x in json.loads(capsys.readouterr().out)["items"]}
        assert run([*argv, "--all-users", "--json", "--socket", sock]) == 0
        assert theirs in {x[key] for x in json.loads(capsys.readouterr().out)["items"]}
    assert run(["dlq", "list", "--all-users", "--json", "--socket", sock]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == []


def test_an_admin_sees_whose_jobs_and_schedules_they_are(
    shared: tuple[DaemonProc, dict[str, Peer], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Root's human views of everyone's rows name each row's owner (the tables gain an
    OWNER column with --all-users; show prints it): two users' schedules may share a
    name, and their jobs otherwise look alike."""
    daemon, peers, _ = shared
    owner = USERS[OWNER]
    status, job = peers[OWNER].request("POST", "/v1/jobs", {"command": ["true"], "run_at": _LATER})
    assert status == 201
    status, sched = peers[OWNER].request(
        "POST", "/v1/schedules", {"every": 3600, "name": "nightly", "job": {"command": ["true"]}}
    )
    assert status == 201
    sock = ["--socket", str(daemon.socket)]
    assert run(["list", "--all-users", *sock]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0][:4] == ["ID", "STATUS", "QUEUE", "OWNER"]
    assert [str(job["id"]), "scheduled", "default", owner] in [r[:4] for r in rows]
    assert run(["schedules", "list", "--all-users", *sock]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0][:3] == ["ID", "NAME", "OWNER"]
    assert [sched["id"], "nightly", owner] in [r[:3] for r in rows]
    assert run(["show", str(job["id"]), *sock]) == 0
    uid = pwd.getpwnam(owner).pw_uid
    assert f"owner  {owner} (uid {uid})" in capsys.readouterr().out


def test_a_user_denied_after_enqueue_is_refused_and_their_job_not_run(
    shared: tuple[DaemonProc, dict[str, Peer], Path],
) -> None:
    daemon, peers, base = shared
    marker = base / "ran"
    later = time.time() + 2
    run_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(later)) + "Z"
    body = {"command": ["/bin/sh", "-c", f"echo > {marker}"], "run_at": run_at, "cwd": "/"}
    status, job = peers[OTHER].request("POST", "/v1/jobs", body)
    assert status == 201, job
    (base / "jobctl.deny").write_text(f"{USERS[OTHER]}\n")
    status, data = peers[OTHER].request("GET", "/v1/status")
    assert status == 403 and "is listed in" in data["error"]["message"]
    assert peers[OWNER].request("GET", "/v1/status")[0] == 200
    dead = _poll(peers[ADMIN], f"/v1/jobs/{job['id']}", lambda j: j["status"] == "dead")
    assert dead["dead_reason"] == "denied", dead
    assert "listed in" in dead["attempts"][-1]["error"]
    assert not marker.exists()
    daemon.wait_for_line("event=owner_denied")
    (base / "jobctl.deny").unlink()
    assert peers[OTHER].request("GET", "/v1/status")[0] == 200
