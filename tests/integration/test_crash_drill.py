"""Short form of the kill -9 drill for the poison rule (issue 13, item 4), on a real daemon."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from jobctl.client import Client
from tests.integration.conftest import DaemonProc, daemon_env, wait_until

#: A command that kills its daemon (named by the lease owner ``host:pid:tag`` in its
#: environment: its parent is the spawn helper, not the daemon).
KILL_DAEMON = 'owner=${JOBCTL_LEASE_OWNER#*:}; kill -9 "${owner%%:*}"'


def cli(d: DaemonProc, *args: str) -> str:
    env = daemon_env() | {"JOBCTL_SOCKET": str(d.socket)}
    out = subprocess.run(
        [sys.executable, "-m", "jobctl", *args], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout


def test_kill_9_while_healthy_jobs_run_never_makes_them_poison(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    """Three kills in a row, each while both jobs run: before, both ended dead as ``poison``
    at the third restart although --max-attempts was 5 and their commands never failed."""
    d = make_daemon()
    script = (
        f"touch {tmp_path}/started.$JOBCTL_JOB_ID.$JOBCTL_ATTEMPT; "
        'if [ "$JOBCTL_ATTEMPT" -le 3 ]; then sleep 60; fi'
    )
    add = ("add", "--max-attempts", "5", "--backoff", "0", "--shell", "--", script)
    ids = [int(cli(d, *add)) for _ in range(2)]
    reclaimed: list[str] = []
    for attempt in (1, 2, 3):
        wait_until(
            lambda a=attempt: all(  # type: ignore[misc]  # mypy cannot type a default arg
                (tmp_path / f"started.{i}.{a}").exists() for i in ids
            ),
            what=f"attempt {attempt} of both jobs to start",
        )
        d.signal(signal.SIGKILL)
        d.wait()
        d = make_daemon(start=False).start(wait=False)
        d.wait_for_line("event=ready")
        for i in ids:
            job = d.client().get(i)
            assert job["status"] != "dead", (attempt, job["dead_reason"])
            reclaimed.append(d.wait_for_line(f"event=reclaimed job={i} "))
    for i in ids:
        d.wait_for_line(f"event=succeeded job={i} ")
        job = d.client().get(i)
        outcomes = [a["outcome"] for a in job["attempts"]]
        assert (job["status"], outcomes[-1], len(outcomes)) == ("succeeded", "succeeded", 4)
    assert len(reclaimed) == 6 and all("survivor=yes" in line for line in reclaimed), reclaimed


def _spawn_helper(d: DaemonProc) -> int:
    """The pid of the daemon's spawn helper (engine/spawner.py), a child of the daemon."""
    assert d.proc is not None
    children = Path(f"/proc/{d.proc.pid}/task/{d.proc.pid}/children").read_text().split()
    for pid in children:
        if b"jobctl.engine.spawner" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return int(pid)
    raise AssertionError(f"no spawn helper among {children}")


def _is_running(client: Client, job_id: int) -> Callable[[], bool]:
    return lambda: bool(client.get(job_id)["status"] == "running")


def test_a_job_claimed_but_not_started_at_each_kill_is_not_poison(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    """Issue 13: reclaimed jobs are started first after a restart, so a daemon killed from
    outside during its start-up had the same job claimed but its command not yet spawned
    at each kill: the lone suspect, ``poison`` at the third. Here the spawn helper is held
    (SIGSTOP) so that the kill lands between the claim and the spawn, three times."""
    d = make_daemon()
    d.client().queue_action("held", "pause")
    body = {"command": ["true"], "queue": "held", "max_attempts": 9, "backoff": {"base": 0}}
    job_id = d.client().enqueue(body)["id"]
    for kill in (1, 2, 3):
        helper = _spawn_helper(d)
        os.kill(helper, signal.SIGSTOP)  # the claim goes through, the spawn waits
        d.client().queue_action("held", "resume")
        wait_until(_is_running(d.client(), job_id), what="the claim")
        d.client().queue_action("held", "pause")  # so the next daemon does not start it
        d.signal(signal.SIGKILL)
        d.wait()
        os.kill(helper, signal.SIGKILL)
        d = make_daemon(start=False).start(wait=False)
        line = d.wait_for_line(f"event=reclaimed job={job_id} ")
        assert "survivor=no status=scheduled" in line, (kill, line)
        d.wait_for_line("event=ready")
    d.client().queue_action("held", "resume")
    d.wait_for_line(f"event=succeeded job={job_id} ")
    outcomes = [a["outcome"] for a in d.client().get(job_id)["attempts"]]
    assert outcomes == ["lease_expired"] * 3 + ["succeeded"]


def test_a_job_that_kills_its_daemon_each_time_is_poison_after_three(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    d = make_daemon()
    job_id = int(
        cli(d, "add", "--max-attempts", "9", "--backoff", "0", "--shell", "--", KILL_DAEMON)
    )
    for crash in (1, 2, 3):
        assert d.wait() == -signal.SIGKILL, f"crash {crash}"
        d = make_daemon(start=False).start(wait=False)
        line = d.wait_for_line(f"event=reclaimed job={job_id} ")
        assert "survivor=no" in line and ("poison" in line) == (crash == 3), line
    d.wait_for_line("event=ready")
    job = d.client().get(job_id)
    assert (job["status"], job["dead_reason"], job["failures"]) == ("dead", "poison", 3)
    assert d.proc is not None and d.proc.poll() is None  # the daemon stays up now


def test_a_job_that_ends_between_the_crash_and_the_restart_is_not_blamed(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    """The drill's case: the command was running when the daemon was killed but had
    finished by the time the next daemon looked. Without the witness it looked like the
    culprit (gone at restart, the only suspect) and ended poison at the third kill."""
    d = make_daemon()
    witness_dir = d.db.with_name(d.db.name + ".witness")
    script = (
        f"touch {tmp_path}/started.$JOBCTL_ATTEMPT; "
        f'if [ "$JOBCTL_ATTEMPT" -le 3 ]; then '
        f"while [ ! -e {tmp_path}/release.$JOBCTL_ATTEMPT ]; do sleep 0.01; done; fi; "
        f"touch {tmp_path}/ended.$JOBCTL_ATTEMPT"
    )
    job_id = int(cli(d, "add", "--max-attempts", "5", "--backoff", "0", "--shell", "--", script))
    leftover: list[Path] = []
    for attempt in (1, 2, 3):
        wait_until((tmp_path / f"started.{attempt}").exists, what=f"attempt {attempt}")
        d.signal(signal.SIGKILL)
        d.wait()
        wait_until(lambda: any(witness_dir.glob("*.json")), what="the witness's evidence")
        (tmp_path / f"release.{attempt}").touch()
        wait_until((tmp_path / f"ended.{attempt}").exists, what=f"attempt {attempt} to end")
        d = make_daemon(start=False).start(wait=False)
        line = d.wait_for_line(f"event=reclaimed job={job_id} ")
        assert "survivor=no status=scheduled" in line, line
        d.wait_for_line("event=ready")
        leftover.extend(witness_dir.glob("*.json"))  # each is used up by the recovery
    d.wait_for_line(f"event=succeeded job={job_id} ")
    job = d.client().get(job_id)
    assert [a["outcome"] for a in job["attempts"]] == ["lease_expired"] * 3 + ["succeeded"]
    assert leftover == []
