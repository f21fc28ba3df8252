"""The extended cron syntax (L, W, #, nL, H) through the real CLI and daemon: ``add``,
``next``, ``schedules`` and ``import-crontab`` agree with each other and with the
evaluator."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from jobctl.domain.cron import next_fire, parse_cron
from tests.integration.conftest import DaemonProc
from tests.integration.test_daemon import cli


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_hashed_last_day_schedule_add_next_and_show_agree(daemon: DaemonProc) -> None:
    cron, zone = "H 3 L * *", "Europe/London"
    out = cli(daemon, "add", "--cron", cron, "--tz", zone, "--json", "--", "true")
    assert out.returncode == 0, out.stderr
    sched = json.loads(out.stdout)
    sid, first = sched["id"], _at(sched["next_run_at"])
    created = _at(sched["created_at"])
    assert first == next_fire(parse_cron(cron, sid), ZoneInfo(zone), created)

    after = (created - timedelta(seconds=1)).isoformat()
    shown = cli(daemon, "next", cron, "--tz", zone, "--seed", sid, "--after", after, "--json")
    assert shown.returncode == 0, shown.stderr
    assert _at(json.loads(shown.stdout)[0]) == first

    human = cli(daemon, "schedules", "show", sid)
    assert human.returncode == 0, human.stderr
    minute = first.astimezone(ZoneInfo(zone)).minute
    assert (
        f"at 03:{minute:02d} on the last day of the month (H hashed from '{sid}')" in human.stdout
    )
    listed = cli(daemon, "schedules", "list")
    assert cron in listed.stdout


def test_crontab_lines_with_the_extended_syntax_import(daemon: DaemonProc, tmp_path: Path) -> None:
    path = tmp_path / "crontab"
    path.write_text(
        "CRON_TZ=America/New_York\n"
        "0 9 * * 1#1 echo first-monday\n"
        "0 18 * * 5L echo last-friday\n"
        "30 8 LW * * echo last-weekday\n"
        "0 7 15W * * echo nearest\n"
        "H H(0-5) * * * echo hashed\n"
    )
    dry = cli(daemon, "import-crontab", str(path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "5 create" in dry.stdout
    done = cli(daemon, "import-crontab", str(path), "--json")
    assert done.returncode == 0, done.stderr
    assert [r["action"] for r in json.loads(done.stdout)["lines"]] == ["created"] * 5
    listed = json.loads(cli(daemon, "schedules", "list", "--json").stdout)["items"]
    by_cron = {s["cron"]: s for s in listed}
    assert set(by_cron) == {
        "0 9 * * 1#1",
        "0 18 * * 5L",
        "30 8 LW * *",
        "0 7 15W * *",
        "H H(0-5) * * *",
    }
    for cron, s in by_cron.items():
        created = _at(s["created_at"])
        expected = next_fire(parse_cron(cron, s["id"]), ZoneInfo("America/New_York"), created)
        assert _at(s["next_run_at"]) == expected, cron
    assert by_cron["0 9 * * 1#1"]["description"] == "at 09:00 on the first Monday of the month"
