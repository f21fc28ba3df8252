"""The CLI defects of issue 12 against a real daemon: --at in --tz, empty refs, tails."""

from __future__ import annotations

import json
import re

from tests.integration.conftest import DaemonProc
from tests.integration.test_daemon import cli


def test_at_in_tz_is_stored_as_that_wall_time_and_said(daemon: DaemonProc) -> None:
    added = cli(daemon, "add", "--at", "2027-03-14 06:00", "--tz", "Asia/Tokyo", "--", "true")
    assert added.returncode == 0, added.stderr
    job_id = int(added.stdout)  # stdout stays the id alone, for scripts
    said = f"job {job_id} runs at 2027-03-14 06:00:00 JST (Asia/Tokyo), 2027-03-13 21:00:00 UTC"
    assert added.stderr.startswith(said) and added.stderr.count("\n") == 1, added.stderr
    assert re.fullmatch(r" \(in [^)]+\)\n", added.stderr[len(said) :]), added.stderr
    job = json.loads(cli(daemon, "show", str(job_id), "--json").stdout)
    assert job["run_at"] == "2027-03-13T21:00:00.000Z"  # was 2027-03-14T06:00 UTC


def test_an_empty_schedule_ref_is_a_usage_error(daemon: DaemonProc) -> None:
    cli(daemon, "add", "--cron", "0 6 * * *", "--", "true")
    for action in ("show", "pause", "resume", "trigger", "delete"):
        out = cli(daemon, "schedules", action, "")
        assert out.returncode == 2, out.stderr  # show was a TypeError traceback
        assert out.stderr == "jobctl: error: the schedule id or name is empty\n"


def test_show_prints_each_attempts_output_tail(daemon: DaemonProc) -> None:
    script = "for i in $(seq 1 30); do echo line-$i; done; echo '[red]x[/red]'; exit 3"
    job_id = int(
        cli(daemon, "add", "--max-attempts", "2", "--backoff", "0", "--shell", "--", script).stdout
    )
    daemon.wait_for_line(f"event=dead job={job_id} ")
    out = cli(daemon, "show", str(job_id))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for n in (1, 2):
        assert (
            f"attempt {n} output (last 10 of 31 lines, all: jobctl logs {job_id} --attempt {n})"
            in text
        )
    assert text.count("  line-30\n") == 2 and "line-21\n" not in text  # bounded: the last 10
    assert text.count("  [red]x[/red]\n") == 2  # printed as it is, not as markup
