"""``jobctl`` started with stdin, stdout or stderr closed (a supervisor that closes them,
a ``>&-``): each gets ``/dev/null`` before anything is opened, so no database, lock or log
file can take fd 0, 1 or 2 and receive what is written to stderr (cli/main.py
``standard_fds``). A real daemon and real CLI processes whose fds 0-2 are closed at exec.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from jobctl.client import Client
from tests.integration.conftest import TEST_DAEMON_ARGS, daemon_env, wait_until
from tests.integration.test_spawn_helper import job


def _closed_std_fds() -> None:
    """In the child before exec: no fd 0, 1 or 2."""
    for fd in (0, 1, 2):
        os.close(fd)


def _fds(pid: int) -> dict[int, str]:
    base = Path(f"/proc/{pid}/fd")
    out = {}
    for entry in base.iterdir():
        try:
            out[int(entry.name)] = os.readlink(entry)
        except FileNotFoundError:
            continue  # closed while listed
    return out


def test_a_daemon_started_without_fds_0_to_2_keeps_its_files_off_them(tmp_path: Path) -> None:
    db, sock = tmp_path / "state" / "jobctl.db", tmp_path / "run" / "jobctl.sock"
    cmd = [sys.executable, "-m", "jobctl", "daemon", "--db", str(db), "--socket", str(sock),
           *TEST_DAEMON_ARGS]  # fmt: skip
    proc = subprocess.Popen(cmd, env=daemon_env(), preexec_fn=_closed_std_fds)  # noqa: PLW1509
    try:
        wait_until(lambda: sock.exists() or proc.poll() is not None, what="the socket")
        assert proc.poll() is None, "the daemon ended"
        client = Client(sock)
        client.status()
        fds = _fds(proc.pid)
        assert [fds[fd] for fd in (0, 1, 2)] == [os.devnull] * 3, fds
        assert any(path == str(db) for fd, path in fds.items() if fd > 2), fds
        done = client.enqueue(job("echo out; echo err >&2"))
        wait_until(lambda: client.get(done["id"])["status"] == "succeeded", what="the job")
        client.close()
        assert db.read_bytes()[:16] == b"SQLite format 3\x00"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0


def test_a_cli_command_without_fds_0_to_2_exits_as_it_would_with_them(tmp_path: Path) -> None:
    """Nothing to print to, the same exit code: not a crash on ``sys.stderr`` being None."""
    cmd = [sys.executable, "-m", "jobctl", "status", "--socket", str(tmp_path / "none.sock")]
    with_fds = subprocess.run(cmd, env=daemon_env(), capture_output=True, check=False)
    assert with_fds.returncode not in (0, 1) and b"jobctl: error:" in with_fds.stderr
    without = subprocess.run(cmd, env=daemon_env(), preexec_fn=_closed_std_fds, check=False)
    assert without.returncode == with_fds.returncode
