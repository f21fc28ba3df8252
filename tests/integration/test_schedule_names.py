"""A deleted schedule's name can be used again, from the CLI and by a crontab re-import."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.conftest import DaemonProc
from tests.integration.test_daemon import cli
from tests.integration.test_import_crontab import schedules


def test_delete_then_add_under_the_same_name(daemon: DaemonProc) -> None:
    first = cli(daemon, "add", "--cron", "0 6 * * *", "--name", "w", "--json", "--", "echo", "hi")
    assert first.returncode == 0, first.stderr
    old = json.loads(first.stdout)["id"]
    assert cli(daemon, "schedules", "delete", "w").returncode == 0
    again = cli(daemon, "add", "--cron", "0 7 * * *", "--name", "w", "--json", "--", "echo", "hi")
    assert again.returncode == 0, again.stderr  # was HTTP 500: UNIQUE schedule_defs.name
    new = json.loads(again.stdout)["id"]
    shown = json.loads(cli(daemon, "schedules", "show", "w", "--json").stdout)
    assert (shown["id"], shown["cron"]) == (new, "0 7 * * *")
    gone = json.loads(cli(daemon, "schedules", "show", old, "--json").stdout)
    assert (gone["name"], gone["deleted"]) == ("w", True)  # history kept, under its name
    taken = cli(daemon, "add", "--cron", "0 8 * * *", "--name", "w", "--", "echo", "hi")
    assert taken.returncode == 4 and "exists" in taken.stderr  # live names stay unique


def test_reimport_after_deleting_one_of_its_schedules(daemon: DaemonProc, tmp_path: Path) -> None:
    path = tmp_path / "crontab"
    path.write_text("0 6 * * * echo one\n0 7 * * * echo two\n")
    assert cli(daemon, "import-crontab", str(path)).returncode == 0
    one, two = sorted(schedules(daemon), key=lambda s: str(s["cron"]))  # 06:00 first
    assert cli(daemon, "schedules", "delete", str(one["name"])).returncode == 0
    dry = json.loads(cli(daemon, "import-crontab", str(path), "--dry-run", "--json").stdout)
    assert [r["action"] for r in dry["lines"]] == ["create", "exists"]
    done = cli(daemon, "import-crontab", str(path), "--json")
    assert done.returncode == 0, done.stderr  # was HTTP 500, after --dry-run said create
    assert [r["action"] for r in json.loads(done.stdout)["lines"]] == ["created", "exists"]
    assert sorted(str(s["name"]) for s in schedules(daemon)) == sorted(
        [str(one["name"]), str(two["name"])]
    )
