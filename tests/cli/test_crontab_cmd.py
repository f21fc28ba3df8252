"""``jobctl import-crontab`` in-process, against a real daemon on a temp socket."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobctl.cli.main import run
from jobctl.domain.crontab import schedule_name
from tests.integration.conftest import DaemonProc

CRONTAB = """\
# nightly things
MAILTO=ops@example.com
SHELL=/bin/bash
GREETING = "hello there"
30 2 * * * ./backup.sh --full
CRON_TZ=Asia/Tokyo
0 6 * * 1-5 echo "$GREETING" | mail -s report ops%body
@reboot ./start.sh
"""


@pytest.fixture(scope="module")
def shared_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProc]:
    """One daemon for the module: starting one costs seconds, a test milliseconds."""
    d = DaemonProc(tmp_path_factory.mktemp("daemon"), "--shutdown-grace", "1").start()
    yield d
    d.stop()


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> Iterator[DaemonProc]:
    """The shared daemon with no live schedules, before and after the test."""
    c = shared_daemon.client()
    for s in c.schedules():
        c.delete_schedule(s["id"])
    yield shared_daemon
    for s in c.schedules():
        c.delete_schedule(s["id"])


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A known home and host zone, so names and zones are predictable."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TZ", "Europe/Berlin")
    monkeypatch.delenv("JOBCTL_SOCKET", raising=False)
    return tmp_path


def crontab(tmp_path: Path, text: str = CRONTAB, name: str = "crontab") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def jobctl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def imported(
    capsys: pytest.CaptureFixture[str], d: DaemonProc, *argv: str
) -> tuple[int, dict[str, Any], str]:
    code, out, err = jobctl(capsys, "import-crontab", *argv, "--json", "--socket", str(d.socket))
    return code, json.loads(out), err


def actions(result: dict[str, Any]) -> list[tuple[int, str]]:
    return [(row["line"], row["action"]) for row in result["lines"]]


def test_import_creates_schedules_as_cron_would_run_them(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, tmp_path: Path
) -> None:
    code, result, err = imported(capsys, daemon, crontab(tmp_path))
    assert (code, err) == (0, "")
    assert actions(result) == [  # MAILTO (line 2): failure mail, in the entries' env
        (5, "created"),
        (7, "created"),
        (8, "unsupported"),
    ]
    by_line = {row["line"]: row for row in result["lines"]}
    listed = {s["name"]: s for s in daemon.client().schedules()}
    assert set(listed) == {by_line[5]["name"], by_line[7]["name"]}
    nightly, report = listed[by_line[5]["name"]], listed[by_line[7]["name"]]
    assert (nightly["cron"], nightly["tz"], report["cron"], report["tz"]) == (
        "30 2 * * *",
        "Europe/Berlin",  # the host zone: no CRON_TZ above line 5
        "0 6 * * 1-5",
        "Asia/Tokyo",
    )
    assert nightly["job"]["command"] == ["/bin/bash", "-c", "./backup.sh --full"]
    assert report["job"]["command"][2].startswith("printf '%s' body | {")
    assert nightly["job"]["env"] == {
        "MAILTO": "ops@example.com",
        "SHELL": "/bin/bash",
        "GREETING": "hello there",
    }
    assert nightly["job"]["cwd"] == str(tmp_path)
    assert (nightly["misfire"], nightly["overlap"], nightly["job"]["max_attempts"]) == (
        "once",
        "skip",
        3,
    )
    assert by_line[5]["id"] == nightly["id"]
    assert by_line[5]["name"] == schedule_name(
        "30 2 * * *",
        "Europe/Berlin",
        nightly["job"]["command"],
        nightly["job"]["env"],
        str(tmp_path),
    )


def test_reimport_creates_nothing_twice_and_adds_only_new_entries(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, tmp_path: Path
) -> None:
    path = crontab(tmp_path)
    assert imported(capsys, daemon, path)[0] == 0
    before = daemon.client().schedules()
    code, again, _ = imported(capsys, daemon, path)
    assert code == 0
    assert actions(again) == [(5, "exists"), (7, "exists"), (8, "unsupported")]
    assert daemon.client().schedules() == before
    Path(path).write_text(CRONTAB + "*/10 * * * * ./poll.sh\n")
    code, grown, _ = imported(capsys, daemon, path)
    assert actions(grown) == [(5, "exists"), (7, "exists"), (8, "unsupported"), (9, "created")]
    assert len(daemon.client().schedules()) == 3


def test_dry_run_creates_nothing_and_shows_the_plan(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, tmp_path: Path
) -> None:
    code, out, err = jobctl(
        capsys, "import-crontab", crontab(tmp_path), "--dry-run", "--socket", str(daemon.socket)
    )
    assert (code, err) == (0, "")
    assert daemon.client().schedules() == []
    for text in ("LINE", "30 2 * * *", "Asia/Tokyo", "./backup.sh --full", "crontab-", "@reboot"):
        assert text in out
    assert "dry run, nothing created: " in out and "2 create" in out


def test_an_error_anywhere_creates_nothing_and_exits_2_naming_the_lines(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, tmp_path: Path
) -> None:
    text = CRONTAB + "61 * * * * broken\nCRON_TZ=Mars/Base\n"
    code, result, err = imported(capsys, daemon, crontab(tmp_path, text))
    assert code == 2
    assert err == (
        "jobctl: error: 2 line(s) of the crontab have errors (line 9, 10); nothing was created\n"
    )
    assert actions(result) == [
        (5, "create"),
        (7, "create"),
        (8, "unsupported"),
        (9, "error"),
        (10, "error"),
    ]
    assert "minute field: 61 is out of range 0-59" in result["lines"][3]["note"]
    assert daemon.client().schedules() == []


def test_a_duplicate_entry_in_one_file_is_created_once(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, tmp_path: Path
) -> None:
    path = crontab(tmp_path, "@daily x\n@daily x\n")
    code, result, _ = imported(capsys, daemon, path)
    assert (code, actions(result)) == (0, [(1, "created"), (2, "exists")])
    assert result["lines"][1]["note"] == "same entry as line 1"


def test_an_existing_name_taken_in_a_race_is_exists_not_an_error(
    capsys: pytest.CaptureFixture[str],
    daemon: DaemonProc,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jobctl.client import Client

    path = crontab(tmp_path, "@daily x\n")
    monkeypatch.setattr(Client, "schedules", lambda self, deleted=False: [])  # a stale read
    assert imported(capsys, daemon, path)[0] == 0
    code, result, _ = imported(capsys, daemon, path)  # the daemon answers 409
    assert (code, actions(result)) == (0, [(1, "exists")])


def test_tz_option_is_the_zone_of_entries_without_cron_tz(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, tmp_path: Path
) -> None:
    code, result, _ = imported(capsys, daemon, crontab(tmp_path), "--tz", "America/New_York")
    assert code == 0
    assert [row["zone"] for row in result["lines"] if row["zone"]] == [
        "America/New_York",
        "Asia/Tokyo",  # CRON_TZ in the file is more specific than --tz
    ]


def test_cron_parity_policies_are_options(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, tmp_path: Path
) -> None:
    path = crontab(tmp_path, "@daily x\n")
    code, _, _ = imported(capsys, daemon, path, "--misfire", "skip", "--max-attempts", "1")
    [sched] = daemon.client().schedules()
    assert (code, sched["misfire"], sched["job"]["max_attempts"]) == (0, "skip", 1)


def test_reads_standard_input(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("@hourly from-stdin\n"))
    code, result, _ = imported(capsys, daemon, "-")
    assert (code, actions(result)) == (0, [(1, "created")])
    monkeypatch.setattr("sys.stdin", io.StringIO("@hourly from-stdin\n"))
    code, result, _ = imported(capsys, daemon)  # no FILE: standard input too
    assert (code, actions(result)) == (0, [(1, "exists")])


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["/nonexistent/crontab"], "no such file: /nonexistent/crontab"),
        (["-"], "crontab -l | jobctl import-crontab"),
        (["--tz", "Mars/Base", "-"], "unknown time zone 'Mars/Base'"),
    ],
)
def test_usage_errors_are_one_line_exit_2(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    fragment: str,
) -> None:
    monkeypatch.setattr("sys.stdin", _Tty())
    code, out, err = jobctl(capsys, "import-crontab", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and fragment in err, err


def test_without_a_daemon_import_fails_but_dry_run_still_checks_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, sock = crontab(tmp_path), str(tmp_path / "down.sock")
    code, out, err = jobctl(capsys, "import-crontab", path, "--socket", sock)
    assert code == 5 and out == "" and "daemon is not running" in err
    code, out, err = jobctl(capsys, "import-crontab", path, "--dry-run", "--socket", sock)
    assert code == 0 and "./backup.sh" in out
    assert err.startswith("jobctl: warning: ") and "cannot tell which entries exist" in err


def test_commands_are_shown_literally_not_as_markup(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = crontab(tmp_path, "@daily echo [bold]x[/bold]\n")
    code, out, _ = jobctl(
        capsys, "import-crontab", path, "--dry-run", "--socket", str(tmp_path / "none")
    )
    assert code == 0 and "echo [bold]x[/bold]" in out


def test_a_system_crontab_line_is_flagged_its_user_column_would_be_the_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``/etc/crontab`` has a user column; read as ``crontab -l``'s format, ``root cd / &&
    run-parts ...`` runs ``root`` (exit 127 every time), and the plan said nothing."""
    text = "17 * * * * root cd / && run-parts /etc/cron.hourly\n0 1 * * * echo root\n"
    path = crontab(tmp_path, text)
    code, out, _ = jobctl(
        capsys, "import-crontab", path, "--dry-run", "--json", "--socket", str(tmp_path / "x")
    )
    assert code == 0
    first, second = json.loads(out)["lines"]
    assert first["action"] == "create" and first["note"].startswith(
        "starts with the user name 'root': a system crontab's user column?"
    )
    assert second["note"] == ""  # a command named on PATH (echo) is not a user name
