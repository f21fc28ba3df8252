"""The test users' names and clean-up (tests/integration/hostusers.py): two runs at once
keep their own users, and a killed run's users go at the next start, whatever the role."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess

import pytest

from tests.integration import test_audit_daemon, test_authz_daemon
from tests.integration.hostusers import remove_leftovers, tagged


def test_every_made_name_carries_this_process_id() -> None:
    """The authz and audit tests made fixed names (``jctown``, ``jctaudit``): a second
    run's set-up deleted the first run's users while its tests ran."""
    made = [
        *test_authz_daemon.USERS.values(),
        test_authz_daemon.SOCKET_GROUP,
        test_authz_daemon.ADMIN_GROUP,
        test_audit_daemon.USER,
    ]
    assert all(name.startswith(f"jcth{os.getpid()}") for name in made), made
    assert len(set(made)) == len(made)


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def test_leftovers_of_a_gone_process_go_and_a_live_ones_stay() -> None:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd (CI runs as root)")
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names a process that is gone
    live, dead = "jcth1zzq", f"jcth{gone.pid}zzq"  # pid 1 is always alive
    for name in (live, dead):
        subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["useradd", "--no-create-home", name], check=True, capture_output=True)
    try:
        remove_leftovers(tagged("zzq"))
        assert (_exists(live), _exists(dead)) == (True, False)
    finally:
        for name in (live, dead):
            subprocess.run(["userdel", name], capture_output=True)
