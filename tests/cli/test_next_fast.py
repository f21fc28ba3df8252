"""``jobctl next`` without Typer: same bytes as the Typer command, and a lean start-up.

:func:`jobctl.cli.main.run` serves a well-formed ``jobctl next`` from
:mod:`jobctl.cli.next_fast` before Typer is imported; anything else goes to the Typer
command.  These tests run each command line both ways and compare stdout, stderr and
the exit code, and check in a fresh interpreter what the fast path imports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobctl.cli import next_fast
from jobctl.cli.main import run
from jobctl.cli.next_fast import NextArgs, parse_argv

NY = "America/New_York"
AFTER = "2027-03-13T12:00:00Z"

# Command lines the fast path serves (parse_argv accepts them).
FAST = [
    pytest.param(["0 6 * * *", "--tz", "Asia/Tokyo", "--after", AFTER], id="human"),
    pytest.param(["0 6 * * *", "--tz", "Asia/Tokyo", "--after", AFTER, "--json"], id="json"),
    pytest.param(["30 2 * * *", "--tz", NY, "--after", AFTER, "--count", "3"], id="dst-gap"),
    pytest.param(["30 2 * * *", "--tz", NY, "--after", AFTER, "-n", "3"], id="short-n"),
    pytest.param(
        ["*/30 * * * *", f"--tz={NY}", "--after=2027-11-07T05:15:00Z", "--count=4"],
        id="dst-fold-equals-form",
    ),
    pytest.param(
        ["0 3 * * *", "--tz", "Pacific/Chatham", "--after", "2027-04-05T00:00:00Z"],
        id="odd-offset",
    ),
    pytest.param(
        ["--json", "--count", "2", "--after", "2027-01-01 00:00", "@daily", "--tz", "UTC"],
        id="interspersed-local-after",
    ),
    pytest.param(["--tz", "UTC", "--after", "2027-01-01", "--", "@hourly"], id="double-dash"),
    pytest.param(
        [
            "0 6 * * *",
            "--tz",
            "UTC",
            "--count",
            "9",
            "--tz",
            "Asia/Tokyo",
            "--count",
            "2",
            "--after",
            AFTER,
        ],
        id="last-repeat-wins",
    ),
    pytest.param(["@daily", "--after", AFTER, "--count", "3"], id="host-zone"),
    pytest.param(["0 6 * * *", "--tz", "UTC", "--after", "2027-03-13T20:59:59.999999Z"], id="frac"),
    pytest.param(["0 23 * * *", "--tz", NY, "--after", "9999-12-28T00:00:00Z"], id="year-9999"),
    pytest.param(
        ["0 23 * * *", "--tz", NY, "--after", "9999-12-28T00:00:00Z", "--json"],
        id="year-9999-json",
    ),
    pytest.param(["* * * * *", "--tz", "UTC", "--after", AFTER, "--count", "1000"], id="count-max"),
    # errors of the command itself: one line, exit 2, raised by the shared code
    pytest.param(["61 * * * *", "--after", AFTER], id="bad-expr"),
    pytest.param(["0 0 * * 1#6"], id="bad-expr-nth"),
    pytest.param(["0 0 30 2 *", "--tz", "UTC"], id="never-fires"),
    pytest.param(["@reboot", "--json"], id="reboot"),
    pytest.param(["-", "--tz", "UTC"], id="dash-expr"),
    pytest.param(["0 6 * * *", "--tz", "Asia/Tokio"], id="bad-zone-hint"),
    pytest.param(["0 6 * * *", "--tz", "localtime"], id="localtime"),
    pytest.param(["0 6 * * *", "--tz="], id="empty-zone"),
    pytest.param(["0 6 * * *", "--tz", "UTC", "--after", "tomorrow"], id="bad-after"),
    pytest.param(["0 6 * * *", "--after="], id="empty-after"),
    pytest.param(["0 6 * * *", "--after", "0001-01-01T00:00:00+01:00"], id="after-range"),
    pytest.param(
        ["0 23 31 12 *", "--tz", NY, "--after", "9999-12-20T00:00Z", "--json"], id="no-fire-left"
    ),
]

# Command lines left to Click (parse_argv returns None): usage errors and --help.
CLICK = [
    pytest.param([], id="missing-argument"),
    pytest.param(["--tz", "UTC", "--json"], id="missing-argument-with-options"),
    pytest.param(["0 6 * * *", "extra"], id="extra-argument"),
    pytest.param(["--", "-5 * * * *", "--tz", "UTC"], id="extra-after-double-dash"),
    pytest.param(["0 6 * * *", "--count", "0"], id="count-0"),
    pytest.param(["0 6 * * *", "--count", "1001"], id="count-1001"),
    pytest.param(["0 6 * * *", "--count", "x"], id="count-x"),
    pytest.param(["0 6 * * *", "-n", "0"], id="short-n-0"),
    pytest.param(["0 6 * * *", "--count", "\u0663", "--after", AFTER], id="count-arabic-3"),
    pytest.param(["0 6 * * *", "--count", "2", "--count"], id="count-no-value"),
    pytest.param(["0 6 * * *", "--tz"], id="tz-no-value"),
    pytest.param(["0 6 * * *", "--json=yes"], id="json-with-value"),
    pytest.param(["0 6 * * *", "--bogus"], id="unknown-option"),
    pytest.param(["0 6 * * *", "--cont", "3"], id="misspelt-option"),
    pytest.param(["0 6 * * *", "-h"], id="short-h"),
    pytest.param(["-5 * * * *"], id="expr-like-an-option"),
    pytest.param(["0 6 * * *", "--help"], id="help"),
    pytest.param(["--help", "--count", "0"], id="help-first"),
]


def run_cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = run(["next", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def both_ways(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """(fast path result, Typer result) of ``jobctl next *argv``."""
    fast = run_cli(capsys, argv)
    with monkeypatch.context() as patch:  # refuse every command line: Typer runs it
        patch.setattr(next_fast, "parse_argv", lambda args: None)
        typer = run_cli(capsys, argv)
    return fast, typer


@pytest.fixture(autouse=True)
def host_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")


@pytest.mark.parametrize("argv", FAST)
def test_fast_path_prints_what_the_typer_command_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    assert parse_argv(argv) is not None  # this command line is served without Typer
    fast, typer = both_ways(capsys, monkeypatch, argv)
    assert fast == typer
    code, out, err = fast
    if code == 0:
        assert err == "" and out.endswith("\n") and out.strip()
    else:
        assert code == 2 and out == ""
        assert err.startswith("jobctl: error: ") and err.count("\n") == 1, err


# Counts Typer's coercion accepts that the fast path leaves to it (it reads only 1-1000).
ODD_COUNTS = [" 5", "+3", "007", "5.0", "1_0"]


@pytest.mark.parametrize("argv", CLICK)
def test_usage_errors_and_help_are_clicks_own(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    assert parse_argv(argv) is None
    fast, typer = both_ways(capsys, monkeypatch, argv)
    assert fast == typer
    code, out, err = fast
    if "--help" in argv:
        assert (code, err) == (0, "") and "Usage: jobctl next " in out
    else:
        assert code == 2 and out == ""
        assert err.startswith("jobctl: error: ") and err.count("\n") == 1, err


@pytest.mark.parametrize("count", ODD_COUNTS)
def test_odd_counts_are_read_by_typer(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, count: str
) -> None:
    argv = ["0 6 * * *", "--tz", "UTC", "--after", AFTER, "--count", count, "--json"]
    assert parse_argv(argv) is None
    fast, typer = both_ways(capsys, monkeypatch, argv)
    assert fast == typer and fast[0] == 0


def test_default_after_is_now_on_both_paths(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, typer = both_ways(capsys, monkeypatch, ["0 6 * * *", "--tz", "Asia/Tokyo"])
    assert fast[0] == typer[0] == 0
    # Identical but for the clock read (the "after:" line shows the current second).
    fast_lines, typer_lines = fast[1].splitlines(), typer[1].splitlines()
    assert [line for line in fast_lines if not line.startswith("after:")] == [
        line for line in typer_lines if not line.startswith("after:")
    ]
    assert fast_lines[3].startswith("after:      ") and fast_lines[3].endswith("Z (now)")


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["0 6 * * *"], NextArgs("0 6 * * *")),
        (["--json", "x"], NextArgs("x", json_=True)),
        (["x", "--tz", "--json"], NextArgs("x", tz="--json")),  # a value is taken as is
        (["x", "--after=a=b", "--count=1000"], NextArgs("x", after="a=b", count_=1000)),
        (["--", "--json"], NextArgs("--json")),
        (["--tz", "--", "x"], NextArgs("x", tz="--")),
    ],
)
def test_parse_argv(argv: list[str], parsed: NextArgs) -> None:
    assert parse_argv(argv) == parsed


# --------------------------------------------------------------------------- a real process

PROBE = r"""
import json, sys
report, argv = sys.argv[1], sys.argv[2:]
sys.argv = ["jobctl", *argv]
from jobctl.cli.main import entry
try:
    entry()
except SystemExit as exc:
    code = exc.code
with open(report, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""
HEAVY = {"typer", "click", "pydantic", "pydantic_core", "rich", "fastapi", "uvicorn", "httpx"}
# Everything of jobctl that `jobctl next` may load (the --after parser only with --after).
LEAN = {
    "jobctl",
    "jobctl.cli",
    "jobctl.cli.errors",
    "jobctl.cli.main",
    "jobctl.cli.next_fast",
    "jobctl.domain",
    "jobctl.domain.cron",
    "jobctl.domain.cron_parse",
    "jobctl.domain.cron_ext",
    "jobctl.domain.cron_words",
    "jobctl.domain.durations",
    "jobctl.errors",
    "jobctl.localzone",
}


def loaded_by(tmp_path: Path, *argv: str) -> tuple[int, list[str], set[str]]:
    """Run ``jobctl *argv`` through the console script's entry point in a fresh
    interpreter; its exit code, stdout lines, and the modules it had loaded."""
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert report.exists(), proc.stderr
    data = json.loads(report.read_text())
    return data["code"], proc.stdout.splitlines(), set(data["modules"])


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(["--tz", "Asia/Tokyo"], id="human"),
        pytest.param(["--json", "--after", AFTER, "--count", "2"], id="json-after-host-zone"),
    ],
)
def test_jobctl_next_imports_no_typer_pydantic_or_rich(tmp_path: Path, options: list[str]) -> None:
    code, out, modules = loaded_by(tmp_path, "next", "0 6 * * *", *options)
    assert code == 0 and out
    assert sorted(m for m in modules if m.split(".")[0] in HEAVY) == []
    assert {m for m in modules if m.split(".")[0] == "jobctl"} <= LEAN
    assert "difflib" not in modules and "pathlib" not in modules  # loaded only when needed


def test_the_import_probe_sees_typer_when_typer_runs(tmp_path: Path) -> None:
    """The probe above can fail: a usage error goes through Typer, and it shows."""
    code, out, modules = loaded_by(tmp_path, "next", "0 6 * * *", "--count", "0")
    assert code == 2 and out == []
    assert {"typer", "pydantic", "jobctl.cli.next_cmd"} <= modules


def test_n_joined_to_its_value_is_read_by_typer(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["0 6 * * *", "-n3", "--after", AFTER]
    assert parse_argv(argv) is None
    long = run_cli(capsys, ["0 6 * * *", "--count", "3", "--after", AFTER])
    assert run_cli(capsys, argv) == long and long[0] == 0 and long[1].count("Z  2027-") == 3
