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
