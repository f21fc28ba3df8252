"""``jobctl logs -f`` says which attempt it shows when it starts past the first.

A job whose first attempt failed (and was retried at once: full jitter) before ``logs -f``
started showed the second attempt's output alone, as if it were all there was.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest

from jobctl.cli import logs_cmd


class FakeClient:
    """A finished job with ``attempts`` attempts, each of whose log is ``try N``."""

    def __init__(self, attempts: int) -> None:
        self.attempts = attempts

    def get(self, job_id: int) -> dict[str, Any]:
        return {"id": job_id, "attempt": self.attempts, "status": "dead"}

    def stream_log(
        self, job_id: int, attempt: int, sink: Callable[[bytes], None], **_: Any
    ) -> dict[str, str]:
        sink(f"try {attempt}\n".encode())
        return {"x-log-start": "0", "x-attempt-running": "0", "x-job-status": "dead"}


def _follow(attempts: int, capsys: pytest.CaptureFixture[str]) -> tuple[bytes, str]:
    out = io.BytesIO()
    logs_cmd.show(FakeClient(attempts), 7, None, follow=True, out=out, sleep=lambda _: None)  # type: ignore[arg-type]
    return out.getvalue(), capsys.readouterr().err


def test_follow_from_a_later_attempt_says_which_and_where_the_earlier_ones_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, err = _follow(2, capsys)
    assert out == b"try 2\n"  # standard output stays the log alone
    assert err == "-- jobctl: attempt 2; earlier ones: jobctl logs 7 --attempt N --\n"


def test_follow_of_a_first_attempt_adds_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    out, err = _follow(1, capsys)
    assert (out, err) == (b"try 1\n", "")
