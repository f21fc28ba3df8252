"""``jobctl next``: fire times in UTC and local time, the DST contract, errors, start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from jobctl.cli.main import run

NY = "America/New_York"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def fires(capsys: pytest.CaptureFixture[str], expr: str, *options: str) -> list[str]:
    """The --json output of ``jobctl next``; it must be a JSON list and nothing else."""
    code, out, err = run_cli(capsys, "next", expr, *options, "--json")
    assert (code, err) == (0, ""), err
    data = json.loads(out)
    assert isinstance(data, list) and all(isinstance(item, str) for item in data)
    return data


# --------------------------------------------------------------------------- the DST contract


def test_spring_forward_fixed_time_runs_once_at_the_end_of_the_gap(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 2027-03-14 02:30 does not exist in New York: 02:00 EST jumps to 03:00 EDT (07:00Z).
    got = fires(capsys, "30 2 * * *", "--tz", NY, "--after", "2027-03-13T12:00:00Z", "--count", "3")
    assert got == ["2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z", "2027-03-16T06:30:00Z"]


def test_spring_forward_wildcard_fires_only_at_existing_times(
    capsys: pytest.CaptureFixture[str],
) -> None:
    got = fires(
        capsys, "*/30 * * * *", "--tz", NY, "--after", "2027-03-14T05:45:00Z", "--count", "4"
    )
    # 01:00 and 01:30 EST, then 03:00 and 03:30 EDT: 02:00 and 02:30 never happen.
    assert got == [
        "2027-03-14T06:00:00Z",
        "2027-03-14T06:30:00Z",
        "2027-03-14T07:00:00Z",
        "2027-03-14T07:30:00Z",
    ]


def test_fall_back_fixed_time_runs_once_at_the_first_pass(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 2027-11-07 01:30 happens at 05:30Z (EDT) and again at 06:30Z (EST): only the first.
    got = fires(capsys, "30 1 * * *", "--tz", NY, "--after", "2027-11-06T12:00:00Z", "--count", "2")
    assert got == ["2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"]


def test_fall_back_wildcard_fires_in_both_passes(capsys: pytest.CaptureFixture[str]) -> None:
    got = fires(
        capsys, "*/30 * * * *", "--tz", NY, "--after", "2027-11-07T04:00:00Z", "--count", "6"
    )
    assert got == [
        "2027-11-07T04:30:00Z",  # 00:30 EDT
        "2027-11-07T05:00:00Z",  # 01:00 EDT
        "2027-11-07T05:30:00Z",  # 01:30 EDT
        "2027-11-07T06:00:00Z",  # 01:00 EST (second pass)
        "2027-11-07T06:30:00Z",  # 01:30 EST (second pass)
        "2027-11-07T07:00:00Z",  # 02:00 EST
    ]


def test_after_inside_the_first_pass_still_sees_the_second_pass(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A local --after is read at its first pass (01:45 EDT = 05:45Z).
    got = fires(capsys, "*/30 * * * *", "--tz", NY, "--after", "2027-11-07 01:45", "--count", "2")
    assert got == ["2027-11-07T06:00:00Z", "2027-11-07T06:30:00Z"]


def test_asia_tokyo_daily(capsys: pytest.CaptureFixture[str]) -> None:
    got = fires(
        capsys, "0 6 * * *", "--tz", "Asia/Tokyo", "--after", "2027-03-13T12:00:00Z", "--count", "3"
    )
    assert got == ["2027-03-13T21:00:00Z", "2027-03-14T21:00:00Z", "2027-03-15T21:00:00Z"]


def test_a_local_after_is_read_in_the_given_zone(capsys: pytest.CaptureFixture[str]) -> None:
    # 2027-03-14 06:00 in Tokyo is itself a fire time, and --after is exclusive.
    got = fires(capsys, "0 6 * * *", "--tz", "Asia/Tokyo", "--after", "2027-03-14 06:00")
    assert got[0] == "2027-03-14T21:00:00Z"
    offset = fires(capsys, "0 6 * * *", "--tz", "Asia/Tokyo", "--after", "2027-03-14T06:00+09:00")
    assert offset == got


# --------------------------------------------------------------------------- --after, --count


@pytest.mark.parametrize(
    ("after", "first"),
    [
        ("2027-03-13T21:00:00Z", "2027-03-14T21:00:00Z"),  # exactly a fire time: excluded
        ("2027-03-13T20:59:59Z", "2027-03-13T21:00:00Z"),  # a second before: included
        ("2027-03-13T20:59:59.999999Z", "2027-03-13T21:00:00Z"),
        ("2027-03-13T21:00:00.000001Z", "2027-03-14T21:00:00Z"),
    ],
)
def test_after_is_exclusive(capsys: pytest.CaptureFixture[str], after: str, first: str) -> None:
    got = fires(capsys, "0 6 * * *", "--tz", "Asia/Tokyo", "--after", after, "--count", "1")
    assert got == [first]


def test_count_default_and_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    after = ("--tz", "UTC", "--after", "2027-01-01T00:00:00Z")
    assert fires(capsys, "@hourly", *after) == [f"2027-01-01T0{h}:00:00Z" for h in range(1, 6)]
    assert len(fires(capsys, "* * * * *", *after, "--count", "1")) == 1
    many = fires(capsys, "* * * * *", *after, "--count", "1000")
    assert len(many) == 1000 and many[-1] == "2027-01-01T16:40:00Z"
    assert many == sorted(set(many))


def test_default_after_is_now(capsys: pytest.CaptureFixture[str]) -> None:
    before = datetime.now(UTC)
    (first,) = fires(capsys, "* * * * *", "--tz", "UTC", "--count", "1")
    later = datetime.now(UTC)
    fire = datetime.fromisoformat(first)
    assert before < fire <= later + timedelta(minutes=1)


def test_fires_stop_at_year_9999(capsys: pytest.CaptureFixture[str]) -> None:
    got = fires(capsys, "0 23 * * *", "--tz", NY, "--after", "9999-12-28T00:00:00Z")
    assert got[-1] == "9999-12-31T04:00:00Z" and len(got) == 4


# --------------------------------------------------------------------------- human output


def test_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "next", "30 2 * * *", "--tz", NY, "--after", "2027-03-13T12:00:00Z", "--count", "2"
    )
    assert (code, err) == (0, "")
    assert out == (
        "expression: 30 2 * * *\n"
        "zone:       America/New_York\n"
        "meaning:    at 02:30 every day\n"
        "after:      2027-03-13 12:00:00Z\n"
        "\n"
        "2027-03-14 07:00:00Z  2027-03-14 03:00:00 EDT (-04:00)"
        "  (moved: the scheduled time falls in a DST gap)\n"
        "2027-03-15 06:30:00Z  2027-03-15 02:30:00 EDT (-04:00)\n"
    )


def test_human_output_marks_the_second_pass_and_odd_offsets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["next", "*/30 * * * *", "--tz", NY, "--after", "2027-11-07T05:15:00Z", "--count", "2"]
    out = run_cli(capsys, *argv)[1].splitlines()
    assert out[-2:] == [
        "2027-11-07 05:30:00Z  2027-11-07 01:30:00 EDT (-04:00)",
        "2027-11-07 06:00:00Z  2027-11-07 01:00:00 EST (-05:00)  (repeated wall time, second pass)",
    ]
    argv = ["next", "0 3 * * *", "--tz", "Pacific/Chatham", "--after", "2027-04-05T00:00:00Z"]
    out = run_cli(capsys, *argv, "--count", "1")[1].splitlines()
    assert out[-1] == "2027-04-05 14:15:00Z  2027-04-06 03:00:00 +1245 (+12:45)"


def test_human_output_expands_macros_and_names_the_host_zone(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    code, out, _ = run_cli(capsys, "next", "@daily", "--after", "2027-03-13T12:00:00Z")
    lines = out.splitlines()
    assert code == 0
    assert lines[:3] == [
        "expression: @daily = 0 0 * * *",
        "zone:       Asia/Kolkata (host zone)",
        "meaning:    at 00:00 every day",
    ]
    assert lines[5] == "2027-03-13 18:30:00Z  2027-03-14 00:00:00 IST (+05:30)"
    assert len(lines) == 10


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["61 * * * *"], "minute field: 61 is out of range 0-59"),
        (["0 0 * * * *"], "got 6 (a seconds field is not supported)"),
        (["0 0 * * 1#6"], "day-of-week field: '1#6': 6 is not a number from 1 to 5"),
        (["0 0 30 2 *"], "never fires: day 30 does not occur in February"),
        (["@reboot"], "@reboot is not supported"),
        (["0 6 * * *", "--tz", "Asia/Tokio"], "'Asia/Tokio' (did you mean Asia/Tokyo?)"),
        (["0 6 * * *", "--tz", "localtime"], "name an IANA zone"),
        (["0 6 * * *", "--after", "tomorrow"], "invalid time 'tomorrow'"),
        (["0 6 * * *", "--after", "0001-01-01T00:00:00+01:00"], "out of range"),
        (["0 6 * * *", "--count", "0"], "--count"),
        (["0 6 * * *", "--count", "1001"], "--count"),
        (["0 23 31 12 *", "--tz", NY, "--after", "9999-12-20T00:00Z"], "before year 10000"),
        ([], "EXPR"),
    ],
)
def test_errors_are_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, "next", *argv)
    assert code == 2
    assert err.startswith("jobctl: error: ") and err.count("\n") == 1, err
    assert message in err
    assert out == "" and "Traceback" not in err


# --------------------------------------------------------------------------- a real process


def test_python_m_jobctl_next_json_imports_no_server_client_or_rich() -> None:
    """The real entry point, and what it loads: no FastAPI, uvicorn, httpx, rich.

    Typer 0.29 itself imports pydantic to coerce any non-boolean parameter, for every
    command; that is allowed here only when typer is the importer (recorded by a
    meta-path hook in the child), never jobctl.
    """
    argv = ["next", "30 2 * * *", "--tz", NY, "--after", "2027-03-13T12:00:00Z", "--count", "2"]
    out = subprocess.run(
        [sys.executable, "-m", "jobctl", *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    assert (out.returncode, out.stderr) == (0, "")
    assert json.loads(out.stdout) == ["2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"]

    probe = r"""
import json, sys, traceback
HEAVY = {"fastapi", "uvicorn", "pydantic", "httpx", "rich"}
first_importer = {}
class Spy:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in HEAVY and top not in first_importer:
            stack = [f.filename for f in traceback.extract_stack()[:-1]]
            stack = [f for f in stack if not f.startswith("<frozen")]
            first_importer[top] = stack[-1]
        return None
sys.meta_path.insert(0, Spy())
from jobctl.cli.main import run
code = run(["next", "0 6 * * *", "--tz", "UTC", "--json"])
loaded = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
jobctl_heavy = sorted(m for m in sys.modules if m.startswith(
    ("jobctl.api", "jobctl.client", "jobctl.cli.render", "jobctl.engine", "jobctl.store")))
print(json.dumps({"code": code, "importers": first_importer, "jobctl": jobctl_heavy}))
"""
    probe_run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert probe_run.returncode == 0, probe_run.stderr
    report = json.loads(probe_run.stdout.splitlines()[-1])
    assert report["code"] == 0 and report["jobctl"] == []
    importers = report["importers"]
    assert set(importers) <= {"pydantic"}, importers
    for importer in importers.values():
        assert f"{os.sep}typer{os.sep}" in importer, importers


def test_hashed_expressions_need_a_seed_and_show_its_times(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from zoneinfo import ZoneInfo

    from jobctl.domain.cron import next_fire, parse_cron

    code, out, err = run_cli(capsys, "next", "H 3 * * *", "--tz", "UTC")
    assert (code, out) == (2, "")
    assert err.startswith("jobctl: error: 'H 3 * * *' uses H, which is hashed from each")
    seed = "sch-0a1b2c3d4e5f"
    got = fires(capsys, "H 3 * * *", "--tz", "UTC", "--seed", seed, "--after", "2027-01-01T00:00Z")
    start = datetime(2027, 1, 1, tzinfo=UTC)
    first = next_fire(parse_cron("H 3 * * *", seed), ZoneInfo("UTC"), start)
    assert got[0] == first.strftime("%Y-%m-%dT%H:%M:%SZ")
    code, out, _ = run_cli(capsys, "next", "H 3 L * *", "--seed", seed, "--tz", "UTC")
    assert code == 0 and "on the last day of the month (H hashed from 'sch-0a1b2c3d4e5f')" in out
