"""The real daemon, driven through its socket and the real CLI."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from jobctl.domain.clock import SystemClock
from jobctl.domain.models import AttemptResult
from jobctl.domain.states import Outcome
from jobctl.errors import LeaseLost
from jobctl.store.sqlite import SqliteStore
from tests.integration.conftest import DaemonProc, daemon_env, wait_until


def cli(d: DaemonProc, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = daemon_env() | {"JOBCTL_SOCKET": str(d.socket)}
    return subprocess.run(
        [sys.executable, "-m", "jobctl", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or d.tmp,
        timeout=60,
    )


def test_add_run_show_logs_through_the_cli(daemon: DaemonProc) -> None:
    out = cli(
        daemon,
        "add",
        "--key",
        "greet",
        "--env",
        "WHO=world",
        "--",
        "sh",
        "-c",
        'echo "hello $WHO from $(pwd) attempt $JOBCTL_ATTEMPT"',
    )
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout)
    daemon.wait_for_line(f"event=succeeded job={job_id} ")
    shown = json.loads(cli(daemon, "show", str(job_id), "--json").stdout)
    assert shown["status"] == "succeeded" and shown["key"] == "greet"
    assert shown["owner_uid"] == os.geteuid()
    [attempt] = shown["attempts"]
    assert attempt["outcome"] == "succeeded" and attempt["exit_code"] == 0
    expected = f"hello world from {daemon.tmp} attempt 1\n"
    assert attempt["output_tail"] == expected
    assert cli(daemon, "logs", str(job_id)).stdout == expected
    again = cli(
        daemon,
        "add",
        "--key",
        "greet",
        "--env",
        "WHO=world",
        "--json",
        "--",
        "sh",
        "-c",
        'echo "hello $WHO from $(pwd) attempt $JOBCTL_ATTEMPT"',
    )
    assert json.loads(again.stdout)["id"] == job_id
    listed = cli(daemon, "list", "--status", "succeeded")
    assert str(job_id) in listed.stdout and "succeeded" in listed.stdout
    status = json.loads(cli(daemon, "status", "--json").stdout)
    assert status["counts"]["succeeded"] == 1 and status["pid"] == daemon.proc.pid  # type: ignore[union-attr]


def test_failing_job_retries_then_dies_and_replays(daemon: DaemonProc, tmp_path: Path) -> None:
    # The replayed run (attempt 3) waits for ``go`` so the second replay below finds it
    # not dead yet however slow the CLI calls are (a 1 s sleep was not always enough).
    go = tmp_path / "go"
    out = cli(
        daemon,
        "add",
        "--max-attempts",
        "2",
        "--backoff",
        "10ms",
        "--shell",
        "--",
        f'echo oops >&2; [ "$JOBCTL_ATTEMPT" -lt 3 ] || until [ -e {go} ]; do sleep 0.01; done;'
        " exit 4",
    )
    job_id = int(out.stdout)
    daemon.wait_for_line(f"event=dead job={job_id} ")
    dead = json.loads(cli(daemon, "dlq", "list", "--json").stdout)["items"]
    assert [(j["id"], j["dead_reason"], j["last_error"]) for j in dead] == [
        (job_id, "max_attempts", "exit code 4")
    ]
    assert "oops" in cli(daemon, "logs", str(job_id), "--attempt", "1").stdout
    replay = cli(daemon, "dlq", "replay", "--limit", "10")
    assert replay.stdout.strip() == f"replayed 1 job(s): {job_id}"
    assert cli(daemon, "dlq", "replay", "--id", str(job_id)).stdout.strip() == "replayed 0 job(s)"
    go.touch()
    daemon.wait_for_line(f"event=dead job={job_id} ")
    job = json.loads(cli(daemon, "show", str(job_id), "--json").stdout)
    assert [a["number"] for a in job["attempts"]] == [1, 2, 3, 4]


def test_cancel_running_job_via_cli(daemon: DaemonProc) -> None:
    job_id = int(cli(daemon, "add", "--", "sleep", "60").stdout)
    daemon.wait_for_line(f"event=started job={job_id} ")
    out = cli(daemon, "cancel", str(job_id))
    assert out.stdout.strip() == f"job {job_id} cancelled"
    daemon.wait_for_line(f"job={job_id} ")  # the fenced (or cancelled) result of the attempt
    job = json.loads(cli(daemon, "show", str(job_id), "--json").stdout)
    assert job["status"] == "cancelled" and job["attempts"][0]["outcome"] == "cancelled"


def test_kill_9_loses_nothing_and_fences_the_old_generation(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    d = make_daemon()
    marker = tmp_path / "first-attempt-running"
    accepted = [int(cli(d, "add", "--in", "1h", "--", "true").stdout) for _ in range(5)]
    job_id = int(
        cli(
            d,
            "add",
            "--backoff",
            "0",
            "--shell",
            "--",
            f'if [ "$JOBCTL_ATTEMPT" = 1 ]; then touch {marker}; sleep 60; fi',
        ).stdout
    )
    wait_until(marker.exists, what="first attempt to start")
    d.signal(signal.SIGKILL)
    d.wait()
    survivors = subprocess.run(["pgrep", "-f", "sleep 60"], capture_output=True, text=True)
    assert survivors.stdout.strip(), "the command outlives a kill -9 of its daemon"

    d2 = make_daemon(start=False).start(wait=False)
    d2.wait_for_line(f"event=reclaimed job={job_id} ")
    d2.wait_for_line("event=ready")
    d2.wait_for_line(f"event=succeeded job={job_id} ")
    job = d2.client().get(job_id)
    assert [a["outcome"] for a in job["attempts"]] == ["lease_expired", "succeeded"]
    assert job["generation"] == 2
    for other in accepted:
        assert d2.client().get(other)["status"] == "scheduled"
    # the dead daemon's attempt (generation 1) can no longer finish the job
    store = SqliteStore(d2.db, SystemClock(), random.Random(), lock=False)
    try:
        with pytest.raises(LeaseLost):
            store.finish(job_id, 1, AttemptResult(Outcome.SUCCEEDED, 0))
    finally:
        store.close()
    assert d2.client().get(job_id)["attempts"][-1]["outcome"] == "succeeded"


def test_sigterm_interrupts_long_jobs_without_spending_budget(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    d = make_daemon("--shutdown-grace", "0.2", "--kill-grace", "0.2")
    job_id = int(cli(d, "add", "--max-attempts", "1", "--", "sleep", "60").stdout)
    d.wait_for_line(f"event=started job={job_id} ")
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
    d2 = make_daemon()
    job = d2.client().get(job_id)
    assert job["attempts"][0]["outcome"] == "interrupted"
    assert job["failures"] == 0 and job["status"] in ("scheduled", "running")


def test_sigterm_lets_short_jobs_finish(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    d = make_daemon("--shutdown-grace", "20")
    marker = tmp_path / "go"
    job_id = int(cli(d, "add", "--shell", "--", f"touch {marker}; sleep 0.3").stdout)
    wait_until(marker.exists, what="job start")
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
    store = SqliteStore(d.db, SystemClock(), lock=False)
    try:
        assert store.get(job_id).attempts[0].outcome is Outcome.SUCCEEDED
    finally:
        store.close()


def test_second_daemon_on_the_same_database_is_refused(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    first = make_daemon()
    second = DaemonProc(tmp_path, "--socket", str(tmp_path / "other.sock"))
    second.start(wait=False)
    assert second.wait() == 6
    second.stop()
    err = "".join(second.lines.queue)
    assert err.startswith("jobctl: error: database ") and "in use" in err
    assert err.count("\n") == 1
    assert first.client().status()["pid"] == first.proc.pid  # type: ignore[union-attr]


def test_socket_is_private_and_http_works_with_curl(daemon: DaemonProc) -> None:
    mode = stat.S_IMODE(daemon.socket.stat().st_mode)
    assert mode == 0o600
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    body = json.dumps({"command": ["true"], "key": "curl-1"})
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "--unix-socket",
            str(daemon.socket),
            "-H",
            "content-type: application/json",
            "-d",
            body,
            "http://localhost/v1/jobs",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert json.loads(out.stdout)["key"] == "curl-1"
    doc = subprocess.run(
        ["curl", "-sS", "--unix-socket", str(daemon.socket), "http://localhost/v1/openapi.json"],
        capture_output=True,
        text=True,
    )
    assert "/v1/jobs" in json.loads(doc.stdout)["paths"]


def test_cli_without_daemon_says_how_to_start_it(tmp_path: Path) -> None:
    env = daemon_env() | {"JOBCTL_SOCKET": str(tmp_path / "none.sock")}
    out = subprocess.run(
        [sys.executable, "-m", "jobctl", "status"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 5
    assert out.stderr.startswith("jobctl: error: the daemon is not running")
    assert str(tmp_path / "none.sock") in out.stderr and "jobctl daemon" in out.stderr
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1
