"""Whose job is it: an admin's ``--all-users`` views and ``show`` name the owner.

An admin listing everyone's jobs or schedules saw rows that differ only by their owner
(two users' schedules may share a name), and no view printed the owner at all. The
dead-letter table also left COMMAND empty for a webhook or worker job (no argv), where
``jobctl list`` says what it sends.
"""

from __future__ import annotations

import pwd

import pytest

from jobctl.cli import cells, render, schedule_views

JOB = {
    "id": 7,
    "status": "dead",
    "queue": "q1",
    "run_at": "2099-01-01T00:00:00Z",
    "finished_at": "2099-01-01T00:00:00Z",
    "attempt": 1,
    "failures": 1,
    "max_attempts": 1,
    "command": ["true"],
    "last_error": "exit 1",
    "dead_reason": "max_attempts",
    "owner_uid": 0,
}
UNKNOWN_UID = 4_000_000_000  # no account: shown as the number, as ls -l does


def _unknown() -> int:
    try:
        pwd.getpwuid(UNKNOWN_UID)
    except KeyError:
        return UNKNOWN_UID
    pytest.skip("this host has an account for the test's unknown uid")


def test_all_users_list_has_an_owner_column_and_the_own_list_has_none() -> None:
    stranger = JOB | {"id": 8, "owner_uid": _unknown()}
    header, *rows = cells.jobs_table([JOB, stranger], owners=True).lines(colour=False)
    assert header.split()[:4] == ["ID", "STATUS", "QUEUE", "OWNER"]
    assert rows[0].split()[:4] == ["7", "dead", "q1", pwd.getpwuid(0).pw_name]
    assert rows[1].split()[:4] == ["8", "dead", "q1", str(UNKNOWN_UID)]
    own = cells.jobs_table([JOB]).lines(colour=False)
    assert "OWNER" not in own[0] and own[1].split()[:3] == ["7", "dead", "q1"]


def test_all_users_list_still_cuts_the_command_and_error_columns() -> None:
    long = JOB | {"command": ["x" * 80], "last_error": "e" * 80}
    row = cells.jobs_table([long], owners=True).lines(colour=False)[1]
    assert "x" * 60 in row and "x" * 61 not in row
    assert "e" * 40 in row and "e" * 41 not in row


def test_the_dead_table_names_owners_and_what_a_webhook_job_sends(
    capsys: pytest.CaptureFixture[str],
) -> None:
    hook = JOB | {"id": 9, "command": [], "http": {"method": "POST", "url": "https://h.example/x"}}
    render.console.print(render.dead_table([JOB, hook], owners=True))
    header, first, second = capsys.readouterr().out.splitlines()[:3]
    assert header.split()[:3] == ["ID", "QUEUE", "OWNER"]
    assert first.split()[:3] == ["7", "q1", pwd.getpwuid(0).pw_name]
    assert "POST https://h.example/x" in second
    render.console.print(render.dead_table([JOB]))
    assert "OWNER" not in capsys.readouterr().out


def test_the_schedules_table_names_owners_with_all_users(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sched = {
        "id": "sch-1", "name": "backup", "cron": "0 6 * * *", "every": None, "tz": "UTC",
        "next_run_at": "2099-01-01T06:00:00Z", "misfire": "once", "overlap": "skip",
        "misfire_skips": 0, "overlap_skips": 0, "pause_skips": 0, "paused": False,
        "deleted": False, "owner_uid": 0,
    }  # fmt: skip
    render.console.print(
        schedule_views.schedules_table([sched, sched | {"owner_uid": _unknown()}], True)
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["ID", "NAME", "OWNER"]
    assert lines[1].split()[:3] == ["sch-1", "backup", pwd.getpwuid(0).pw_name]
    assert lines[2].split()[:3] == ["sch-1", "backup", str(UNKNOWN_UID)]


def test_show_says_whose_job_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    detail = JOB | {
        "key": "k", "priority": 0, "cwd": "/", "env": {}, "timeout": None,
        "backoff": {"base": 1.0, "cap": 60.0}, "created_at": "2099-01-01T00:00:00Z",
    }  # fmt: skip
    render.job_detail(detail)
    assert f"owner  {pwd.getpwuid(0).pw_name} (uid 0)" in capsys.readouterr().out


def test_secrets_list_is_a_table_and_says_when_there_are_none(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It printed ``1001<TAB>default<TAB>created 2026-...Z`` (raw uid and UTC time), and
    nothing at all for a user without secrets."""
    from jobctl.cli.webhook_cmd import print_secrets

    print_secrets([])
    assert capsys.readouterr().out.startswith("no secrets")
    print_secrets(
        [
            {"owner_uid": 0, "name": "default", "created_at": "2099-01-01T00:00:00Z",
             "rotated_at": None},
            {"owner_uid": _unknown(), "name": "hooks", "created_at": "2099-01-01T00:00:00Z",
             "rotated_at": "2099-01-02T00:00:00Z"},
        ]
    )  # fmt: skip
    header, first, second = capsys.readouterr().out.splitlines()
    assert header.split() == ["OWNER", "NAME", "CREATED", "ROTATED"]
    assert first.split()[:2] == [pwd.getpwuid(0).pw_name, "default"] and first.endswith("-")
    assert second.split()[:2] == [str(UNKNOWN_UID), "hooks"] and "\t" not in second
    assert "2099-01-02" in second


def test_show_says_which_schedule_made_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    detail = JOB | {
        "key": "sch-1@2099-01-01T00:00:00Z", "priority": 0, "cwd": "/", "env": {},
        "timeout": None, "backoff": {"base": 1.0, "cap": 60.0},
        "created_at": "2099-01-01T00:00:00Z", "schedule_id": "sch-1",
        "scheduled_for": "2099-01-01T00:00:00Z",
    }  # fmt: skip
    render.job_detail(detail)
    line = next(x for x in capsys.readouterr().out.splitlines() if "schedule " in x)
    assert line.split()[:2] == ["schedule", "sch-1:"] and "its occurrence of 2099-01-01" in line
    render.job_detail(detail | {"scheduled_for": None})
    assert "sch-1: triggered by hand" in capsys.readouterr().out
    render.job_detail(JOB | {k: detail[k] for k in detail if k not in ("schedule_id",)})
    assert "schedule " not in capsys.readouterr().out
