"""Defects a new user hit in the first hour (issue 12, items 2, 3 and 6), in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from jobctl.cli import job_actions
from jobctl.cli.bodies import job_body
from jobctl.cli.main import app, run
from jobctl.cli.schedules import schedule_body
from jobctl.domain.policies import Misfire, Overlap
from tests.cli.test_cli import run_cli


def _groups() -> list[list[str]]:
    """Every command group, as the words that name it ([] is ``jobctl`` itself)."""
    found: list[list[str]] = []

    def walk(cmd: object, path: list[str]) -> None:
        commands = getattr(cmd, "commands", None)  # a group (Typer vendors its click)
        if commands is not None:
            found.append(path)
            for name, sub in commands.items():
                walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


GROUPS = _groups()


def test_the_groups_are_found() -> None:
    assert {"dlq", "queues", "schedules", "config"} <= {g[0] for g in GROUPS if g}
    assert [] in GROUPS


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: " ".join(["jobctl", *g]))
def test_a_group_without_subcommand_prints_its_help_and_exits_0(
    capsys: pytest.CaptureFixture[str], group: list[str]
) -> None:
    code, out, err = run_cli(capsys, *group)
    assert (code, err) == (0, "")  # was: help, then "jobctl: error: " and exit 2
    assert f"Usage: {' '.join(['jobctl', *group])} [OPTIONS] COMMAND" in out


SOCKET = ["--socket", "/nonexistent/jobctl.sock"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--overlap", "queue"], "--overlap applies only to schedules (--cron/--every)"),
        (["--name", "w"], "--name applies only to schedules (--cron/--every)"),
        (["--jitter", "1m"], "--jitter applies only to schedules (--cron/--every)"),
        (["--misfire", "all"], "--misfire applies only to schedules (--cron/--every)"),
        (["--catch-up-limit", "5"], "--catch-up-limit applies only to schedules"),
        (["--at", "2027-03-14 06:00", "--overlap", "skip"], "--overlap applies only"),
        (["--tz", "Asia/Tokyo"], "--tz applies only to --at, --cron and --every"),
        (["--in", "5m", "--tz", "Asia/Tokyo"], "--tz applies only to --at"),
        (["--cron", "0 7 * * *", "--key", "k"], "--key applies only to one-off jobs"),
        (["--every", "1h", "--in", "5m"], "--in applies only to one-off jobs"),
    ],
)
def test_options_of_the_other_kind_of_job_are_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, "add", *SOCKET, *argv, "--", "echo", "hi")
    assert code == 2 and out == ""
    assert err == f"jobctl: error: {err.removeprefix('jobctl: error: ')}" and message in err
    assert err.count("\n") == 1


def test_a_naive_at_is_wall_time_in_tz() -> None:
    body = job_body(["true"], at="2027-03-14 06:00", tz="Asia/Tokyo")
    assert body["run_at"] == "2027-03-13T21:00:00+00:00"  # was 06:00 UTC: --tz dropped
    offset = job_body(["true"], at="2027-03-14T06:00:00+01:00", tz="Asia/Tokyo")
    assert offset["run_at"] == "2027-03-14T05:00:00+00:00"  # an explicit offset wins


def test_a_naive_at_without_tz_is_in_the_users_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    assert job_body(["true"], at="2027-03-14 06:00")["run_at"] == "2027-03-14T10:00:00+00:00"


def test_an_interval_anchor_is_read_in_tz_too() -> None:
    job = job_body(["true"])
    body = schedule_body(
        job, None, "1h", "2027-03-14 06:00", "Asia/Tokyo", None, Misfire.ONCE, 100,
        Overlap.SKIP, None,
    )  # fmt: skip
    assert body["at"] == "2027-03-13T21:00:00+00:00" and body["tz"] == "Asia/Tokyo"


@pytest.mark.parametrize(
    "argv",
    [
        ["add", "--in", "99999999d", "--", "echo", "x"],  # was OverflowError
        ["add", "--in", "9" * 400 + "s", "--", "echo", "x"],
        ["add", "--at", "9999-12-31 23:00", "--tz", "America/New_York", "--", "x"],
        ["add", "--at", "2027-03-14 06:00", "--tz", "", "--", "x"],
        ["add", "--at", "2027-03-14 06:00", "--tz", "Nowhere/Else", "--", "x"],
        ["schedules", "show", ""],  # was TypeError (the list of all schedules)
        ["schedules", "delete", ""],
        ["schedules", "pause", ""],
        ["queues", "pause", ""],
        ["queues", "set", "", "--concurrency", "1"],
        ["queues", "set", "q", "--rate", "inf/s"],
        ["queues", "set", "q", "--memory-max", "lots"],
        ["queues", "set", "q", "--cpu-quota", "half"],
        ["queues", "set", "q", "--nice", "99"],
        ["queues", "set", "q", "--nice", "1", "--clear-nice"],
        ["schedules", "edit", "n", "--memory-max", "lots"],
        ["schedules", "edit", "n", "--nice", "1", "--clear-nice"],
        ["dlq", "replay", "--rate", "1e999"],
        ["dlq", "list", "--since", "0001-01-01T00:00:00+01:00"],
        ["top", "--interval", "inf"],  # was OverflowError in time.sleep after a frame
        ["top", "--interval", "nan"],
    ],
    ids=lambda argv: " ".join(argv)[:60],
)
def test_bad_values_are_one_line_exit_2_never_a_traceback(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, err = run_cli(capsys, *argv, *SOCKET)
    assert code == 2, err
    assert err.startswith("jobctl: error: ") and err.count("\n") == 1, err
    assert out == "" and "Traceback" not in err


def test_a_bug_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kw: object) -> None:
        raise ZeroDivisionError("a bug")

    # add_job: what both the Typer command and the fast path (jobctl.cli.fast) run
    monkeypatch.setattr(job_actions, "add_job", broken)
    monkeypatch.delenv("JOBCTL_DEBUG", raising=False)
    code, out, err = run_cli(capsys, "add", "--", "true")
    assert code == 1 and out == ""
    assert err == (
        "jobctl: error: internal error: ZeroDivisionError: a bug "
        "(JOBCTL_DEBUG=1 shows the traceback)\n"
    )
    monkeypatch.setenv("JOBCTL_DEBUG", "1")
    code, _, err = run_cli(capsys, "add", "--", "true")
    assert code == 1 and "Traceback" in err and err.endswith("shows the traceback)\n")


def test_run_guards_every_exception_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    from jobctl.cli import main

    def boom(args: list[str]) -> int:
        raise RuntimeError("x")

    monkeypatch.setattr(main, "_run_typer", boom)
    assert run(["logs", "1"]) == 1  # (not a command line jobctl.cli.fast serves)


def test_help_says_how_a_naive_at_is_read(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    text = CliRunner().invoke(app, ["add", "--help"], env={"COLUMNS": "200"}).output
    assert "in --tz" in text and "your zone" in text
