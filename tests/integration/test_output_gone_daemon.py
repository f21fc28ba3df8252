"""A daemon whose stdout and stderr went away while it runs (an ssh session closed, a
``| tee`` killed, journald restarted): a real daemon on a real pipe whose read end is then
closed. Its jobs run as before, each writing to its own log; its spawn helper stays the
same process and never held the pipe; it says once, in its own log file, that stderr is
gone, and logs on there (jobctl/daemonlog.py, engine/helperio.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobctl.client import Client
from tests.integration.conftest import TEST_DAEMON_ARGS, daemon_env, terminate, wait_until
from tests.integration.test_spawn_helper import helper_of, job

JOBS = 6
#: The command of each job: where its stdout and stderr go.
WHERE = "readlink /proc/self/fd/1 /proc/self/fd/2"


class PipedDaemon:
    """``jobctl daemon`` with stdout and stderr on one pipe, read until it is ready."""

    def __init__(self, tmp: Path, spawner: str) -> None:
        self.db = tmp / "state" / "jobctl.db"
        self.socket = tmp / "run" / "jobctl.sock"
        read, write = os.pipe()
        cmd = [sys.executable, "-m", "jobctl", "daemon", "--db", str(self.db),
               "--socket", str(self.socket), *TEST_DAEMON_ARGS]  # fmt: skip
        env = daemon_env() | {"JOBCTL_JOB_SPAWNER": spawner}
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=write, stderr=write, env=env
            )
        finally:
            os.close(write)
        self.read = read
        self.said = b""
        while b"event=ready" not in self.said:  # each read waits for the daemon's lines
            chunk = os.read(read, 65536)
            assert chunk, self.said.decode(errors="replace")
            self.said += chunk
        self.client = Client(self.socket)

    def close_reader(self) -> None:
        """Whoever read the daemon's output is gone."""
        os.close(self.read)
        self.read = -1

    def log(self) -> str:
        path = self.db.parent / "daemon.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        self.client.close()
        if self.read >= 0:
            os.close(self.read)
        terminate(self.proc)


@pytest.fixture(params=["helper", "inline"])
def piped(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PipedDaemon]:
    d = PipedDaemon(tmp_path, request.param)
    try:
        yield d
    finally:
        d.stop()


def test_jobs_run_on_and_the_daemon_logs_on_after_its_output_pipe_lost_its_reader(
    piped: PipedDaemon,
) -> None:
    daemon_pipe = os.readlink(f"/proc/{piped.proc.pid}/fd/2")
    helper = helper_of(piped.proc.pid)
    if helper is not None:  # never the daemon's output: /dev/null and a pipe of its own
        assert os.readlink(f"/proc/{helper}/fd/1") == os.devnull
        assert os.readlink(f"/proc/{helper}/fd/2") != daemon_pipe
    piped.close_reader()
    ids = [piped.client.enqueue(job(WHERE))["id"] for _ in range(JOBS)]
    finished = [f"event=succeeded job={i} " for i in ids]
    wait_until(lambda: all(f in piped.log() for f in finished), 60, "the jobs' finish lines")
    for job_id in ids:
        got = piped.client.get(job_id)
        assert got["status"] == "succeeded", got
        out, err = got["attempts"][0]["output_tail"].splitlines()
        assert out == err and out.endswith(f"/logs/000000/{job_id}.1.log"), (out, err)
    assert piped.client.status()["pid"] == piped.proc.pid  # still answering
    assert helper_of(piped.proc.pid) == helper  # never restarted
    lines = piped.log().splitlines()
    gone = [line for line in lines if "event=log_stream_gone" in line]
    assert len(gone) == 1 and "stream=stderr error=EPIPE" in gone[0], lines
    assert lines[0] == gone[0]  # said first, before the lines it could not write
    assert "event=spawn_helper_died" not in piped.log()
    # What is written to stderr outside the log handler (a fatal traceback) lands there too.
    assert os.readlink(f"/proc/{piped.proc.pid}/fd/2") == str(piped.db.parent / "daemon.log")
