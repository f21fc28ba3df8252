"""``jobctl import-crontab`` end to end: the real CLI, the real daemon, a real run."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.conftest import DaemonProc
from tests.integration.test_daemon import cli


def schedules(d: DaemonProc) -> list[dict[str, object]]:
    out = cli(d, "schedules", "list", "--json")
    assert out.returncode == 0, out.stderr
    listed: list[dict[str, object]] = json.loads(out.stdout)["items"]
    return listed


def test_import_list_reimport_and_an_imported_entry_runs_as_under_cron(
    daemon: DaemonProc, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    path = tmp_path / "crontab"
    path.write_text(
        "SHELL=/bin/bash\n"
        f"HOME={home}\n"
        'GREETING = "hello there "\n'
        "CRON_TZ=Asia/Tokyo\n"
        # \% is a literal % in the command; after the first %, input lines.
        '30 2 * * * printf \'\\%s|\' "$GREETING" "$PWD" "$SHELL" > out.txt; '
        "cat >> out.txt%line one%100\\% sure\n"
        "@reboot ./start.sh\n"
    )

    dry = cli(daemon, "import-crontab", str(path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "dry run, nothing created: 1 create, 1 unsupported" in dry.stdout
    assert schedules(daemon) == []

    first = cli(daemon, "import-crontab", str(path), "--json")
    assert first.returncode == 0, first.stderr
    rows = json.loads(first.stdout)["lines"]
    assert [(r["line"], r["action"]) for r in rows] == [(5, "created"), (6, "unsupported")]
    [listed] = schedules(daemon)
    assert (listed["name"], listed["id"]) == (rows[0]["name"], rows[0]["id"])
    assert (listed["cron"], listed["tz"]) == ("30 2 * * *", "Asia/Tokyo")

    again = cli(daemon, "import-crontab", str(path))
    assert again.returncode == 0, again.stderr
    assert "exists" in again.stdout and "1 exists, 1 unsupported" in again.stdout
    assert [s["id"] for s in schedules(daemon)] == [listed["id"]]

    job_id = int(cli(daemon, "schedules", "trigger", str(listed["name"])).stdout)
    daemon.wait_for_line(f"event=succeeded job={job_id} ")
    assert (home / "out.txt").read_text() == f"hello there |{home}|/bin/bash|line one\n100% sure"


def test_an_error_line_fails_the_import_and_creates_nothing(
    daemon: DaemonProc, tmp_path: Path
) -> None:
    path = tmp_path / "crontab"
    path.write_text("@daily ./fine.sh\n0 25 * * * ./bad-hour.sh\n")
    out = cli(daemon, "import-crontab", str(path))
    assert out.returncode == 2
    assert "hour field: 25 is out of range 0-23" in out.stdout
    assert out.stderr == (
        "jobctl: error: 1 line(s) of the crontab have errors (line 2); nothing was created\n"
    )
    assert schedules(daemon) == []
