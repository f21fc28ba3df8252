"""The spawn helper under real signals: kill -9 of the helper, of the daemon, a stopped
helper that dies with a request unread. No attempt may be lost or run twice."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integration.conftest import DaemonProc, wait_until


def helper_pid(d: DaemonProc) -> int:
    """The daemon's spawn helper (its child running jobctl.engine.spawner)."""
    assert d.proc is not None
    helper = helper_of(d.proc.pid)
    if helper is None:
        raise AssertionError("no spawn helper")
    return helper


def helper_of(pid: int) -> int | None:
    """The spawn helper of the daemon ``pid`` (its child running jobctl.engine.spawner),
    or None."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[1]
        except OSError:
            continue
        if b"jobctl.engine.spawner" in args and int(ppid) == pid:
            return int(entry.name)
    return None


def job(command: str, **extra: Any) -> dict[str, Any]:
    return {"command": ["sh", "-c", command], "cwd": "/", **extra}


def finished(d: DaemonProc, job_id: int, status: str) -> dict[str, Any]:
    d.wait_for_line(f"event={status} job={job_id} ")
    return d.client().get(job_id)


def test_kill_9_of_the_helper_keeps_running_commands_and_their_exit_codes(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    d = make_daemon()
    go, runs = tmp_path / "go", tmp_path / "runs"
    wait = f"echo $JOBCTL_JOB_ID >> {runs}; while [ ! -e {go} ]; do sleep 0.02; done"
    ids = [d.client().enqueue(job(f"{wait}; exit {code}", max_attempts=1))["id"]
           for code in (0, 7)]  # fmt: skip
    wait_until(lambda: runs.exists() and len(runs.read_text().split()) == 2, what="both started")
    old = helper_pid(d)
    os.kill(old, signal.SIGKILL)
    d.wait_for_line("event=spawn_helper_died")
    go.touch()
    ok, bad = finished(d, ids[0], "succeeded"), finished(d, ids[1], "dead")
    assert [a["exit_code"] for a in ok["attempts"]] == [0]
    assert [(a["exit_code"], a["error"]) for a in bad["attempts"]] == [(7, "exit code 7")]
    # A new helper starts the next command.
    again = d.client().enqueue(job("exit 0"))["id"]
    assert finished(d, again, "succeeded")["attempts"][0]["exit_code"] == 0
    assert helper_pid(d) != old
    assert sorted(runs.read_text().split()) == sorted(map(str, ids))  # each ran once


def test_a_command_that_kills_its_helper_is_not_run_twice(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    d = make_daemon()
    runs = tmp_path / "runs"
    command = f"echo x >> {runs}; kill -9 $PPID; sleep 0.2; exit 5"
    job_id = d.client().enqueue(job(command, max_attempts=1))["id"]
    got = finished(d, job_id, "dead")
    assert [(a["exit_code"], a["outcome"]) for a in got["attempts"]] == [(5, "failed")]
    d.wait_for_line("event=spawn_helper_died")
    assert runs.read_text() == "x\n"


def test_a_request_the_dead_helper_never_read_runs_once_on_the_next(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    d = make_daemon()
    runs = tmp_path / "runs"
    old = helper_pid(d)
    os.kill(old, signal.SIGSTOP)  # the request waits in the socket, unread
    job_id = d.client().enqueue(job(f"echo x >> {runs}"))["id"]
    os.kill(old, signal.SIGKILL)
    got = finished(d, job_id, "succeeded")
    assert runs.read_text() == "x\n"
    assert [a["outcome"] for a in got["attempts"]][-1] == "succeeded"


def _ended(pid: int) -> bool:
    """Gone, or a zombie nobody reaps (its parent, the daemon, was killed: the orphan goes
    to whatever reaper the host has, which in a container may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_kill_9_of_the_daemon_ends_its_helper_and_recovery_stops_the_command(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    d = make_daemon()
    started = tmp_path / "started"
    job_id = d.client().enqueue(job(f"touch {started}; sleep 60"))["id"]
    wait_until(started.exists, what="the command to start")
    helper = helper_pid(d)
    d.signal(signal.SIGKILL)
    d.wait()
    wait_until(lambda: _ended(helper), what="the helper to end")
    d2 = make_daemon(start=False).start()
    line = d2.wait_for_line(f"event=reclaimed job={job_id} ")
    assert "survivor=yes" in line
