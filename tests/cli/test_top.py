"""``jobctl top --once`` against a real daemon: the frame shows what the daemon is doing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobctl.cli.bodies import job_body
from jobctl.cli.main import run
from tests.integration.conftest import DaemonProc, daemon_env


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProc]:
    d = DaemonProc(tmp_path, "--shutdown-grace", "1", "--kill-grace", "1").start()
    yield d
    d.stop()


def top_once(capsys: pytest.CaptureFixture[str], d: DaemonProc) -> tuple[int, str, str]:
    code = run(["top", "--once", "--socket", str(d.socket)])
    out, err = capsys.readouterr()
    return code, out, err


def test_top_shows_queues_a_running_job_and_a_failure(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, tmp_path: Path
) -> None:
    c = daemon.client()
    # Runs until the test writes to the FIFO: waiting on an event, not a sleep.
    fifo = tmp_path / "hold"
    os.mkfifo(fifo)
    running = c.enqueue(job_body(["sh", "-c", f"cat {fifo}"], queue="reports", cwd=tmp_path))
    dead = c.enqueue(job_body(["sh", "-c", "exit 3"], queue="fragile", max_attempts=1))
    daemon.wait_for_line(f"event=started job={running['id']} ")
    daemon.wait_for_line(f"event=dead job={dead['id']} ")
    c.create_schedule(
        {"cron": "0 6 * * *", "tz": "UTC", "name": "morning", "job": {"command": ["true"]}}
    )
    code, out, err = top_once(capsys, daemon)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("jobctl ") and "slots 1/16 busy" in lines[0]
    assert "timer tick" in lines[0] and f"pid {daemon.proc.pid}" in lines[0]  # type: ignore[union-attr]
    assert "running 1" in lines[1] and "dead 1" in lines[1]
    [reports] = [line for line in lines if line.lstrip().startswith("reports ")]
    assert reports.split() == ["reports", "0", "0", "1", "-", "0"]  # waiting due running ... dead
    [fragile] = [line for line in lines if line.lstrip().startswith("fragile ")]
    assert fragile.split()[-1] == "1"
    assert "running (1)" in out
    # the command as top shows it: its first 80 characters (tmp_path under pytest-xdist
    # is longer, /tmp/pytest-of-root/pytest-N/popen-gwN/..., and the fifo's name is cut)
    [row] = [line for line in lines if f"sh -c cat {fifo}"[:80] in line]
    assert row.split()[:4] == [str(running["id"]), "reports", "1", "0/3"]  # attempt, failed
    [failure] = [line for line in lines if "exit 3" in line and "max_attempts" in line]
    assert failure.split()[:2] == [str(dead["id"]), "fragile"]
    assert "schedules: 1 (0 paused)" in out
    fifo.write_text("go\n")  # the reader is open: this releases the job
    daemon.wait_for_line(f"event=succeeded job={running['id']} ")
    code, out, _ = top_once(capsys, daemon)
    assert code == 0 and "running: none" in out


def test_top_on_an_idle_daemon(capsys: pytest.CaptureFixture[str], daemon: DaemonProc) -> None:
    code, out, _ = top_once(capsys, daemon)
    assert code == 0
    for text in ("queues: none yet", "running: none", "failures (dead): none", "schedules: none"):
        assert text in out


def test_top_without_a_daemon_is_the_usual_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = run(["top", "--once", "--socket", str(tmp_path / "down.sock")])
    out, err = capsys.readouterr()
    assert code == 5 and out == "" and err.count("\n") == 1
    assert err.startswith("jobctl: error: the daemon is not running")


def test_live_top_ends_quietly_on_ctrl_c(daemon: DaemonProc) -> None:
    env = daemon_env() | {"JOBCTL_SOCKET": str(daemon.socket)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobctl", "top", "--interval", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the first frame is on screen: the loop is running
    assert first.startswith("jobctl ")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert (proc.returncode, err) == (0, "")
