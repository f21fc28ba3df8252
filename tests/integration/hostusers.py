"""Real Unix users for tests of a root daemon serving several users.

``host_users`` creates them once per session and removes them afterwards; it skips
cleanly when the tests do not run as root or ``useradd`` is missing. Their names (and their
groups') carry the pid of the process that made them (``jcth<pid>own``): the workers of
one parallel run (pytest-xdist), or two suites on one machine, each have users of their
own and never delete each other's; the leftovers of a process that is gone (a run killed
before its teardown) are removed when the next session starts. Other modules that make
users or groups name them with :func:`tagged` and clean up with :func:`remove_leftovers`.
``as_user`` runs a small stdlib-only Python script as one of them (the system Python: a
virtual environment under /root is out of their reach).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SYSTEM_PYTHON = "/usr/bin/python3"
_TAG = f"jcth{os.getpid()}"
#: The names made this way, in any process: the pid that made them, then the role.
_MADE = re.compile(r"jcth(\d+)([a-z]{3})")


def tagged(role: str) -> str:
    """This process's user or group name for ``role`` (three lowercase letters): fixed
    names collided when two runs (two checkouts' CI, xdist workers) made them at once,
    and one run's teardown deleted the other's users mid-test."""
    name = f"{_TAG}{role}"
    assert _MADE.fullmatch(name), role
    return name


GROUP = tagged("grp")  # both users' supplementary group, and the socket's group
EXTRA = tagged("ext")  # a second supplementary group of the owner only
OWNER, OTHER = tagged("own"), tagged("oth")


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: Path

    def groups(self) -> list[int]:
        return os.getgrouplist(self.name, self.gid)


@dataclass(frozen=True)
class Users:
    owner: User  # in GROUP and EXTRA
    other: User  # in GROUP; home 0700


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@pytest.fixture(scope="session")
def host_users() -> Iterator[Users]:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd (CI runs as root)")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"needs {SYSTEM_PYTHON} for scripts run as the test users")
    remove_leftovers(OWNER, OTHER, GROUP, EXTRA)
    names = (OWNER, OTHER)
    for group in (GROUP, EXTRA):
        _run("groupadd", group)
    _run("useradd", "-m", "-G", f"{GROUP},{EXTRA}", names[0])
    _run("useradd", "-m", "-G", GROUP, names[1])
    made = []
    for name in names:
        pw = pwd.getpwnam(name)
        made.append(User(name, pw.pw_uid, pw.pw_gid, Path(pw.pw_dir)))
    os.chmod(made[1].home, 0o700)
    try:
        yield Users(made[0], made[1])
    finally:
        for name in names:
            subprocess.run(["userdel", "-r", name], capture_output=True)
        for group in (GROUP, EXTRA):
            subprocess.run(["groupdel", group], capture_output=True)


def remove_leftovers(*mine: str) -> None:
    """Delete the users and groups :func:`tagged` made in earlier processes that are gone,
    and ``mine`` (this process's, should its pid have been used before), users first (a
    group cannot go while it is a user's primary one)."""

    def stale(name: str) -> bool:
        made = _MADE.fullmatch(name)
        return made is not None and (name in mine or not os.path.exists(f"/proc/{made[1]}"))

    for pw in pwd.getpwall():
        if stale(pw.pw_name):
            subprocess.run(["userdel", "-r", pw.pw_name], capture_output=True)
    for gr in grp.getgrall():
        if stale(gr.gr_name):
            subprocess.run(["groupdel", gr.gr_name], capture_output=True)


def shared_socket() -> Path:
    """A socket path the test users can reach (tmp_path is root's only)."""
    base = Path(tempfile.mkdtemp(prefix="jcth-"))
    os.chmod(base, 0o755)
    return base / "jobctl.sock"


def group_args() -> tuple[str, ...]:
    grp.getgrnam(GROUP)
    return ("--socket-group", GROUP)


_REQUEST = r"""
import http.client, json, socket, sys
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(sys.argv[1])
c = C("localhost", timeout=30)
body = sys.argv[4].encode() if sys.argv[4] else None
c.request(sys.argv[2], sys.argv[3], body, {"content-type": "application/json"})
r = c.getresponse()
print(json.dumps({"status": r.status, "body": json.loads(r.read() or b"null")}))
"""


def as_user(user: User, script: str, *args: str, timeout: float = 60) -> str:
    """Run ``script`` with the system Python as ``user`` (its groups too); its stdout."""
    out = subprocess.run(
        [SYSTEM_PYTHON, "-c", script, *args],
        user=user.uid,
        group=user.gid,
        extra_groups=user.groups(),
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return out.stdout


def request_as(
    user: User, socket_path: Path, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    """One API request over the socket from ``user``'s own process (so with its uid)."""
    raw = "" if body is None else json.dumps(body)
    answer = json.loads(as_user(user, _REQUEST, str(socket_path), method, path, raw))
    return answer["status"], answer["body"]
