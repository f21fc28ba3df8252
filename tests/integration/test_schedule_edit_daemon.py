"""``jobctl schedules edit`` on a real daemon: the edit, its history in ``show``, the
error contract (rename clash, nothing to change, a deleted schedule)."""

from __future__ import annotations

import json
import os
import pwd

from tests.integration.conftest import DaemonProc
from tests.integration.test_daemon import cli


def test_edit_timing_template_and_history(daemon: DaemonProc) -> None:
    add = cli(daemon, "add", "--cron", "0 6 * * *", "--tz", "UTC", "--name", "rep", "--", "true")
    assert add.returncode == 0, add.stderr
    sid = add.stdout.strip()
    out = cli(
        daemon, "schedules", "edit", "rep", "--cron", "30 7 * * *", "--tz", "Asia/Tokyo",
        "--queue", "reports", "--env", "A=1", "--", "echo", "new",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"schedule {sid} edited: ")
    assert "cron '0 6 * * *' -> '30 7 * * *'" in out.stdout
    assert "job.queue 'default' -> 'reports'" in out.stdout
    shown = json.loads(cli(daemon, "schedules", "show", "rep", "--json").stdout)
    assert (shown["cron"], shown["tz"]) == ("30 7 * * *", "Asia/Tokyo")
    assert shown["job"]["command"] == ["echo", "new"] and shown["job"]["env"] == {"A": "1"}
    assert shown["next_run_at"].endswith("T22:30:00.000Z")
    [edit] = shown["edits"]
    assert edit["by_uid"] == os.getuid() and set(edit["changes"]) == {"cron", "tz", "job"}
    human = cli(daemon, "schedules", "show", "rep").stdout
    me = f"{pwd.getpwuid(os.getuid()).pw_name} (uid {os.getuid()})"
    assert "recent edits" in human and f"by {me}" in human and f"owner  {me}" in human

    again = cli(daemon, "schedules", "edit", sid, "--name", "rep2", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["name"] == "rep2"


def test_edit_errors_are_one_line(daemon: DaemonProc) -> None:
    for name in ("a", "b"):
        assert cli(daemon, "add", "--every", "1h", "--name", name, "--", "true").returncode == 0
    clash = cli(daemon, "schedules", "edit", "a", "--name", "b")
    assert clash.returncode != 0 and clash.stdout == ""
    assert clash.stderr == "jobctl: error: a schedule named 'b' exists\n"
    nothing = cli(daemon, "schedules", "edit", "a")
    assert nothing.returncode == 2 and nothing.stderr.startswith("jobctl: error: nothing to change")
    bad = cli(daemon, "schedules", "edit", "a", "--cron", "61 * * * *")
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    assert cli(daemon, "schedules", "delete", "a").returncode == 0
    gone = cli(daemon, "schedules", "edit", "a", "--every", "2h")
    assert gone.returncode != 0 and "no schedule 'a'" in gone.stderr
