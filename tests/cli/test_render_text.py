"""What the human views show is what was typed: markup and emoji codes stay text."""

from __future__ import annotations

import pytest

from jobctl.cli import render

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
    render.console.print(render.jobs_table([JOB]))
    out = capsys.readouterr().out
    assert "echo :smile: [red]x[/]" in out
    assert "exit 1 :warning:" in out


def test_a_replayed_job_shows_its_budget_not_attempt_over_max(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """After a replay the attempt count goes on (5) but the budget is fresh: one failure
    of three used.  ``5/3`` read as over budget; the table shows both numbers apart."""
    replayed = JOB | {"status": "scheduled", "attempt": 5, "failures": 1, "max_attempts": 3}
    render.console.print(render.jobs_table([replayed]))
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert header.split()[5:7] == ["ATTEMPT", "FAILED"]  # after ID STATUS QUEUE RUN AT
    assert row.split()[:3] == ["7", "scheduled", "q1"]
    assert "5/3" not in row and " 5 " in row and " 1/3 " in row
