"""What the human views show is what was typed: markup and emoji codes stay text."""

from __future__ import annotations

import pytest

from jobctl.cli import cells, render, schedule_views

JOB = {
    "id": 7,
    "status": "dead",
    "queue": "q1",
    "run_at": "2099-01-01T00:00:00Z",
    "attempt": 1,
    "max_attempts": 1,
    "command": ["echo", ":smile:", "[red]x[/]"],
    "last_error": "exit 1 :warning:",
}


def test_a_command_is_shown_as_typed_not_as_emoji_or_markup(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cells.jobs_table([JOB]).print()
    out = capsys.readouterr().out
    assert "echo :smile: [red]x[/]" in out
    assert "exit 1 :warning:" in out


def test_a_replayed_job_shows_its_budget_not_attempt_over_max(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """After a replay the attempt count goes on (5) but the budget is fresh: one failure
    of three used.  ``5/3`` read as over budget; the table shows both numbers apart."""
    replayed = JOB | {"status": "scheduled", "attempt": 5, "failures": 1, "max_attempts": 3}
    cells.jobs_table([replayed]).print()
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert header.split()[5:7] == ["ATTEMPT", "FAILED"]  # after ID STATUS QUEUE RUN AT
    assert row.split()[:3] == ["7", "scheduled", "q1"]
    assert "5/3" not in row and " 5 " in row and " 1/3 " in row


def test_show_says_how_many_earlier_attempts_it_leaves_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    attempt = {
        "number": 30, "generation": 30, "started_at": "2099-01-01T00:00:00Z", "finished_at": None,
        "outcome": None, "exit_code": None, "error": None, "output_tail": "",
    }  # fmt: skip
    detail = JOB | {
        "key": None, "priority": 0, "cwd": "/", "env": {}, "failures": 0, "timeout": None,
        "backoff": {"base": 1.0, "cap": 60.0}, "created_at": "2099-01-01T00:00:00Z",
        "attempts": [attempt], "attempts_total": 30, "attempts_earlier": 29,
    }  # fmt: skip
    render.job_detail(detail)
    assert "29 earlier attempts, see jobctl attempts 7" in capsys.readouterr().out
    render.job_detail(detail | {"attempts_total": 1, "attempts_earlier": 0})
    assert "earlier" not in capsys.readouterr().out


def test_the_list_table_lines_up_its_columns_and_colours_only_a_terminal() -> None:
    """``jobctl list`` draws without rich (cli/plaintable.py): columns start at the same
    offset on every line, the status is coloured on a terminal and plain in a pipe, a
    long command is cut at 60 characters and a newline in it cannot break the row."""
    long = JOB | {"id": 12345, "status": "running", "command": ["x" * 80, "a\nb"]}
    table = cells.jobs_table([JOB, long])
    plain = table.lines(colour=False)
    assert len(plain) == 3 and "\x1b" not in "".join(plain)
    starts = {
        line.index(word) for line, word in zip(plain, ["STATUS", "dead", "running"], strict=True)
    }
    assert len(starts) == 1
    assert "x" * 60 in plain[2] and "x" * 61 not in plain[2]
    coloured = table.lines(colour=True)
    assert "\x1b[31mdead\x1b[0m" in coloured[1] and "\x1b[1mID\x1b[0m" in coloured[0]


def test_an_edit_summary_says_none_and_intervals_in_words() -> None:
    """A cron schedule made an interval one read ``cron '0 7 * * *' -> None; every None
    -> 300.0``: Python's words for unset and the interval's bare seconds."""
    changes = {
        "cron": {"from": "0 7 * * *", "to": None},
        "every": {"from": None, "to": 300.0},
        "jitter": {"from": 30, "to": 0},
        "job": {"from": {"queue": "a", "timeout": None}, "to": {"queue": "b", "timeout": 5}},
    }
    assert schedule_views.edit_summary(changes) == (
        "cron '0 7 * * *' -> none; every none -> 5 minutes; jitter 30 seconds -> none; "
        "job.queue 'a' -> 'b'; job.timeout none -> 5 seconds"
    )
