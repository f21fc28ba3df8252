"""Schedules on the real daemon, through the CLI."""

from __future__ import annotations

import json

from tests.integration.conftest import DaemonProc
from tests.integration.test_daemon import cli


def test_interval_schedule_fires_and_is_visible(daemon: DaemonProc) -> None:
    out = cli(
        daemon,
        "add",
        "--every",
        "1s",
        "--name",
        "tick",
        "--shell",
        "--",
        'echo "$JOBCTL_SCHEDULE_ID@$JOBCTL_SCHEDULED_FOR"',
    )
    assert out.returncode == 0, out.stderr
    sid = out.stdout.strip()
    assert sid.startswith("sch-")
    line = daemon.wait_for_line(f"event=enqueued schedule={sid} ")
    job_id = int(line.split(" job=")[1].split()[0])
    daemon.wait_for_line(f"event=succeeded job={job_id} ")
    job = json.loads(cli(daemon, "show", str(job_id), "--json").stdout)
    assert job["attempts"][0]["output_tail"].strip() == job["key"]
    assert job["schedule_id"] == sid
    shown = json.loads(cli(daemon, "schedules", "show", "tick", "--json").stdout)
    assert shown["id"] == sid and shown["every"] == 1.0
    assert job_id in [o["job_id"] for o in shown["occurrences"]]
    human = cli(daemon, "schedules", "show", "tick").stdout
    assert "every 1 second" in human and "next fires" in human
    assert cli(daemon, "schedules", "pause", "tick").stdout.strip() == f"schedule {sid} paused"
    assert "tick" in cli(daemon, "schedules", "list").stdout
    status = cli(daemon, "status").stdout
    assert "schedules: 1 (1 paused)" in status


def test_cron_schedule_and_trigger(daemon: DaemonProc) -> None:
    out = cli(
        daemon, "add", "--cron", "0 6 * * *", "--tz", "Asia/Tokyo", "--json", "--", "echo", "report"
    )
    sched = json.loads(out.stdout)
    assert sched["tz"] == "Asia/Tokyo" and sched["cron"] == "0 6 * * *"
    assert sched["next_run_at"].endswith("T21:00:00.000Z")
    job_id = int(cli(daemon, "schedules", "trigger", sched["id"]).stdout)
    daemon.wait_for_line(f"event=succeeded job={job_id} ")
    listed = json.loads(cli(daemon, "schedules", "list", "--json").stdout)["items"]
    assert [s["id"] for s in listed] == [sched["id"]]
    deleted = cli(daemon, "schedules", "delete", sched["id"])
    assert deleted.stdout.strip() == f"schedule {sched['id']} deleted"


def test_bad_schedule_input_is_one_line(daemon: DaemonProc) -> None:
    for args, fragment in [
        (["--cron", "61 * * * *"], "minute field: 61 is out of range 0-59"),
        (["--cron", "@daily", "--tz", "Asia/Tokio"], "Asia/Tokyo"),
        (["--cron", "@daily", "--every", "1h"], "either --cron or --every"),
        (["--cron", "@daily", "--in", "5m"], "one-off"),
    ]:
        out = cli(daemon, "add", *args, "--", "true")
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.startswith("jobctl: error: ") and fragment in out.stderr
        assert out.stderr.count("\n") == 1
    missing = cli(daemon, "schedules", "show", "nope")
    assert missing.returncode == 3 and "no schedule 'nope'" in missing.stderr
