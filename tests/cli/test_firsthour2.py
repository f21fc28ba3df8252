"""Defects left by the first-hour review (branch firsthour2), in-process."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from jobctl import daemon
from jobctl.cli.bodies import PAST_GRACE
from jobctl.cli.errors import user_words
from jobctl.client import Client
from jobctl.client.wire import error_from
from jobctl.errors import IllegalTransition, InvalidInput
from jobctl.localzone import local_zone_name
from tests.cli.test_cli import run_cli


@pytest.mark.parametrize(
    ("tz", "name"),
    [
        ("Europe/Berlin", "Europe/Berlin"),
        (":Asia/Tokyo", "Asia/Tokyo"),
        ("/usr/share/zoneinfo/America/New_York", "America/New_York"),
    ],
)
def test_tz_names_a_zone(monkeypatch: pytest.MonkeyPatch, tz: str, name: str) -> None:
    monkeypatch.setenv("TZ", tz)
    assert local_zone_name() == name


@pytest.mark.parametrize("tz", ["Invalid/Zone", "CET-1CEST", "localtime", ":"])
def test_a_tz_naming_no_zone_is_an_error(monkeypatch: pytest.MonkeyPatch, tz: str) -> None:
    monkeypatch.setenv("TZ", tz)
    with pytest.raises(InvalidInput, match="TZ=") as caught:  # was: UTC, silently
        local_zone_name()
    assert repr(tz) in caught.value.message


def test_a_bad_tz_stops_the_cli_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TZ", "Europe/Berlni")
    code, out, err = run_cli(capsys, "next", "0 6 * * *")
    assert (code, out) == (2, "")
    assert err.startswith("jobctl: error: environment variable TZ='Europe/Berlni'")
    assert "did you mean Europe/Berlin?" in err and err.count("\n") == 1


def test_a_bad_tz_refuses_the_daemon_start(monkeypatch: pytest.MonkeyPatch) -> None:
    def started(config: object) -> object:
        raise AssertionError("the daemon started with a bad TZ")

    monkeypatch.setenv("TZ", "Invalid/Zone")
    monkeypatch.setattr(daemon, "harden_process", started)
    with pytest.raises(InvalidInput, match="TZ='Invalid/Zone'"):
        daemon.run_daemon(object())  # type: ignore[arg-type]


def _refusal(message: str) -> InvalidInput:
    body = json.dumps({"error": {"code": "invalid_input", "message": message}}).encode()
    err = error_from(422, body)
    assert isinstance(err, InvalidInput)
    return err


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ("path.job_id: Input should be >= 1", "ID: Input should be >= 1"),
        ("job.priority: Input should be <= 1000", "--priority: Input should be <= 1000"),
        (
            "max_attempts: Input should be >= 1; run_at: bad",
            "--max-attempts: Input should be >= 1; --at/--in: bad",
        ),
        ("query.limit: too big", "--limit: too big"),
        ("backoff.base: too small", "--backoff: too small"),
        ("0.priority: too big", "0.priority: too big"),  # an item of a batch file: as written
        ("a job id must be a number", "a job id must be a number"),
    ],
)
def test_the_daemons_field_paths_are_shown_as_typed(message: str, shown: str) -> None:
    assert user_words(_refusal(message)) == shown


def test_the_clis_own_messages_are_left_alone() -> None:
    assert user_words(InvalidInput("timeout: our own words")) == "timeout: our own words"


def test_run_prints_the_flag_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(self: Client, job_id: int) -> dict[str, object]:
        raise _refusal("path.job_id: Input should be less than or equal to 9007199254740991")

    monkeypatch.setattr(Client, "get", refuse)
    monkeypatch.setattr(Client, "request", lambda self, *a, **k: refuse(self, 0))
    code, _, err = run_cli(capsys, "show", "--socket", "/nonexistent/s", "9" * 20)
    assert code == 2
    assert err == "jobctl: error: ID: Input should be less than or equal to 9007199254740991\n"


@pytest.mark.parametrize("key", ["", "  "])
def test_an_empty_key_is_refused(capsys: pytest.CaptureFixture[str], key: str) -> None:
    code, out, err = run_cli(capsys, "add", "--socket", "/nonexistent/s", "--key", key, "--", "x")
    assert (code, out) == (2, "")  # was: a job without a key (exit 5 here: no daemon)
    assert err == "jobctl: error: --key must not be empty (leave it out for a job without a key)\n"


def _fake_jobs(monkeypatch: pytest.MonkeyPatch, status: str) -> list[int]:
    """A daemon holding one job 5 in ``status``, answering cancels as the real one does;
    the ids ``cancel`` was posted for (tests/cli/test_cancel_daemon.py: the real one)."""
    posted: list[int] = []

    def cancel(self: Client, job_id: int) -> dict[str, object]:
        posted.append(job_id)
        if status in ("succeeded", "dead"):
            raise IllegalTransition(f"job {job_id}: cannot cancel", job_id=job_id, status=status)
        return {"id": job_id, "status": "cancelled", "already_cancelled": status == "cancelled"}

    monkeypatch.setattr(Client, "cancel", cancel)
    return posted


@pytest.mark.parametrize(
    ("status", "code", "out", "err"),
    [
        ("scheduled", 0, "job 5 cancelled\n", ""),
        ("running", 0, "job 5 cancelled\n", ""),
        ("cancelled", 0, "job 5 was already cancelled\n", ""),  # was "job 5 cancelled"
        ("succeeded", 4, "", "jobctl: error: job 5 already ended (succeeded): nothing to cancel\n"),
        ("dead", 4, "", "jobctl: error: job 5 already ended (dead): nothing to cancel\n"),
    ],
)
def test_cancel_is_idempotent_and_says_what_happened(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    status: str,
    code: int,
    out: str,
    err: str,
) -> None:
    posted = _fake_jobs(monkeypatch, status)
    assert run_cli(capsys, "cancel", "--socket", "/nonexistent/s", "5") == (code, out, err)
    assert posted == [5]  # one request whatever the status (was: a GET first)


def _iso(delta: timedelta) -> str:
    return (datetime.now(UTC) + delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_past_at_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "add", "--socket", "/nonexistent/s", "--at", "2020-01-01 06:00", "--tz", "UTC",
        "--", "true",
    )  # fmt: skip
    assert (code, out) == (2, "")  # was: enqueued to run at once (here: exit 5, no daemon)
    assert err.startswith("jobctl: error: --at 2020-01-01 06:00: that time is past (2020-01-01")
    assert err.endswith("; give a future time, or leave --at out to run now\n")


def test_an_at_just_past_runs_now_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sent: list[dict[str, object]] = []

    def enqueue(self: Client, job: dict[str, object]) -> dict[str, object]:
        sent.append(job)
        return {"id": 9, "run_at": job["run_at"], "status": "scheduled"}

    monkeypatch.setattr(Client, "enqueue", enqueue)
    at = _iso(-timedelta(seconds=PAST_GRACE - 60))
    code, out, err = run_cli(capsys, "add", "--socket", "/nonexistent/s", "--at", at, "--", "x")
    assert (code, out) == (0, "9\n") and len(sent) == 1
    assert err.endswith("\nnote: that time has passed: the job runs now\n")
    future = _iso(timedelta(hours=1))
    code, out, err = run_cli(capsys, "add", "--socket", "/x/s", "--at", future, "--", "x")
    assert code == 0 and "passed" not in err and " ago)" not in err
