"""Queues and the dead-letter queue on the real daemon, through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from tests.integration.conftest import DaemonProc, daemon_env
from tests.integration.test_daemon import cli


def _dead_jobs(d: DaemonProc, n: int, *command: str) -> list[int]:
    argv = command or ("false",)
    ids = [int(cli(d, "add", "--max-attempts", "1", "--", *argv).stdout) for _ in range(n)]
    for job_id in ids:
        d.wait_for_line(f"event=dead job={job_id} ")
    return ids


def test_paused_queue_keeps_jobs_across_a_restart(make_daemon: Callable[..., DaemonProc]) -> None:
    d = make_daemon()
    out = cli(d, "queues", "pause", "batch")
    assert out.stdout.startswith("queue batch: paused"), out.stderr
    ids = [int(cli(d, "add", "--queue", "batch", "--", "true").stdout) for _ in range(3)]
    queues = {q["queue"]: q for q in json.loads(cli(d, "queues", "list", "--json").stdout)}
    assert (queues["batch"]["waiting"], queues["batch"]["paused"]) == (3, True)
    d.stop()
    d2 = make_daemon()
    assert all(d2.client().get(i)["status"] == "scheduled" for i in ids)
    cli(d2, "queues", "resume", "batch")
    for job_id in ids:
        d2.wait_for_line(f"event=succeeded job={job_id} ")
    assert "batch" in cli(d2, "queues", "list").stdout


def test_a_change_to_a_queue_that_did_not_exist_says_so(daemon: DaemonProc) -> None:
    """``jobctl queues pause mial`` (a typo of mail) made and paused a new queue and said
    nothing, while mail's jobs went on running."""
    cli(daemon, "add", "--queue", "mail", "--", "true")
    typo = cli(daemon, "queues", "pause", "mial")
    assert typo.returncode == 0 and typo.stdout.startswith("queue mial: paused")
    assert typo.stderr == (
        "jobctl: note: queue 'mial' is new (it had no jobs or settings); the queues were: mail\n"
    )
    for argv in (("pause", "mail"), ("resume", "mial"), ("set", "mail", "--concurrency", "2")):
        again = cli(daemon, "queues", *argv)
        assert (again.returncode, again.stderr) == (0, ""), argv
    fresh = cli(daemon, "queues", "set", "batch", "--concurrency", "1", "--json")
    assert json.loads(fresh.stdout)["concurrency"] == 1
    assert "queue 'batch' is new" in fresh.stderr and "mail, mial" in fresh.stderr


def test_queue_limits_via_cli(daemon: DaemonProc) -> None:
    out = cli(
        daemon,
        "queues",
        "set",
        "api",
        "--concurrency",
        "2",
        "--rate",
        "30/m",
        "--burst",
        "5",
        "--json",
    )
    q = json.loads(out.stdout)
    assert (q["concurrency"], q["rate"], q["burst"]) == (2, 0.5, 5)
    bad = cli(daemon, "queues", "set", "api", "--rate", "fast")
    assert bad.returncode == 2 and "invalid rate 'fast'" in bad.stderr


def test_dlq_dry_run_gated_replay_and_purge(daemon: DaemonProc) -> None:
    ids = _dead_jobs(daemon, 3)
    listed = json.loads(cli(daemon, "dlq", "list", "--reason", "max_attempts", "--json").stdout)[
        "items"
    ]
    assert sorted(j["id"] for j in listed) == ids
    dry = cli(daemon, "dlq", "replay", "--limit", "2", "--dry-run")
    assert dry.stdout.strip() == f"would replay 2 job(s) at 1/s: {ids[0]} {ids[1]}"
    assert len(json.loads(cli(daemon, "dlq", "list", "--json").stdout)["items"]) == 3  # unchanged
    out = cli(daemon, "dlq", "replay", "--limit", "2", "--rate", "20/s", "--json")
    replayed = json.loads(out.stdout)
    assert [j["id"] for j in replayed] == ids[:2]
    gap = [j["run_at"] for j in replayed]
    assert gap[1] > gap[0]  # released one after the other
    for job_id in ids[:2]:
        daemon.wait_for_line(f"event=dead job={job_id} ")
    shown = json.loads(cli(daemon, "dlq", "show", str(ids[0]), "--json").stdout)
    assert [a["number"] for a in shown["attempts"]] == [1, 2]
    count = cli(daemon, "dlq", "purge", "--older-than", "0s")
    assert "run again with --yes" in count.stdout
    assert cli(daemon, "dlq", "purge", "--older-than", "0s", "--yes").stdout.strip() == (
        "purged 3 dead job(s)"
    )


def test_dlq_list_since_takes_how_long_ago_as_audit_does(daemon: DaemonProc) -> None:
    [dead] = _dead_jobs(daemon, 1)
    recent = cli(daemon, "dlq", "list", "--since", "1h", "--json")
    assert recent.returncode == 0, recent.stderr
    assert [j["id"] for j in json.loads(recent.stdout)["items"]] == [dead]
    later = cli(daemon, "dlq", "list", "--since", "2999-01-01T00:00:00Z", "--json")
    assert json.loads(later.stdout)["items"] == []


def test_dlq_replay_takes_job_ids_as_arguments_as_dlq_show_does(daemon: DaemonProc) -> None:
    """``jobctl dlq show 42`` then ``jobctl dlq replay 42``: the id was refused as an
    extra argument (only ``--id 42`` worked)."""
    ids = _dead_jobs(daemon, 3)
    dry = cli(daemon, "dlq", "replay", str(ids[2]), str(ids[0]), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.strip() == f"would replay 2 job(s) at 1/s: {ids[2]} {ids[0]}"
    out = cli(daemon, "dlq", "replay", str(ids[1]), "--json")
    assert out.returncode == 0, out.stderr
    assert [j["id"] for j in json.loads(out.stdout)] == [ids[1]]
    daemon.wait_for_line(f"event=dead job={ids[1]} ")  # ran again (and failed again)
    attempts = {i: len(daemon.client().get(i)["attempts"]) for i in ids}
    assert attempts == {ids[0]: 1, ids[1]: 2, ids[2]: 1}


def test_dlq_replay_says_why_a_job_it_names_is_not_replayed(daemon: DaemonProc) -> None:
    """A job named by id that is not dead was skipped without a word ("replayed 0
    job(s)"); the dry run and the replay take the same jobs (the first --limit ids)."""
    ok = int(cli(daemon, "add", "--", "true").stdout)
    daemon.wait_for_line(f"event=succeeded job={ok} ")
    dead = _dead_jobs(daemon, 2)
    argv = ("dlq", "replay", str(ok), str(dead[0]), str(dead[1]), "--limit", "2")
    dry = cli(daemon, *argv, "--dry-run")
    out = cli(daemon, *argv)
    assert (dry.returncode, out.returncode) == (0, 0), out.stderr
    assert dry.stdout.strip() == f"would replay 1 job(s) at 1/s: {dead[0]}"
    assert out.stdout.strip() == f"replayed 1 job(s): {dead[0]}"
    for got in (dry, out):
        assert got.stderr.splitlines() == [
            f"jobctl: warning: job {ok} not replayed: it is succeeded, not dead",
            f"jobctl: warning: job {dead[1]} not replayed: past --limit 2 (only the first 2 "
            "ids are taken)",
        ]


def test_racing_replays_run_each_job_once(daemon: DaemonProc) -> None:
    # the first attempt fails, a replayed one succeeds: a second run would be visible
    ids = _dead_jobs(daemon, 6, "sh", "-c", '[ "$JOBCTL_ATTEMPT" -gt 1 ]')
    env = daemon_env() | {"JOBCTL_SOCKET": str(daemon.socket)}
    cmd = [
        sys.executable,
        "-m",
        "jobctl",
        "dlq",
        "replay",
        "--limit",
        "6",
        "--rate",
        "100/s",
        "--json",
    ]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    got = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    replayed = [j["id"] for batch in got for j in batch]
    assert sorted(replayed) == ids  # every job exactly once across both replays
    for job_id in ids:
        daemon.wait_for_line(f"event=succeeded job={job_id} ")
    for job_id in ids:
        assert len(daemon.client().get(job_id)["attempts"]) == 2
