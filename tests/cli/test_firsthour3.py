"""What a new user hits in the first hour (branch house): the parser's refusals show what
was typed, and ``jobctl logs`` of a job without output says why."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from jobctl.cli.bodies import job_body
from jobctl.cli.errors import parser_words
from jobctl.cli.main import run
from tests.integration.conftest import DaemonProc

KEY = "job-01a2310435ca36e9cc3a502da53c"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (  # was: "Input should be a valid integer, unable to parse string as an integer"
            ["show", KEY],
            f"Invalid value for 'ID': '{KEY}' is not a whole number (a job's id is the "
            "number 'jobctl add' printed; a --key is not an id)",
        ),
        (
            ["add", "--priority", "high", "--", "true"],
            "Invalid value for '--priority': 'high' is not a whole number",
        ),
        (  # was: "Input should be greater than or equal to 1"
            ["add", "--max-attempts", "0", "--", "true"],
            "Invalid value for '--max-attempts': '0' should be greater than or equal to 1",
        ),
        (  # was: "Value error, 'bogus' is not one of ..."
            ["list", "--status", "bogus"],
            "Invalid value for '--status': 'bogus' is not one of 'scheduled', 'running', "
            "'succeeded', 'dead', 'cancelled'.",
        ),
    ],
)
def test_a_refused_value_is_named_in_the_users_words(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    assert run_cli(capsys, *argv, "--socket", "/nonexistent/s") == (
        2,
        "",
        f"jobctl: error: {said}\n",
    )


def test_a_refusal_without_pydantics_details_is_left_as_it_is() -> None:
    assert parser_words(ValueError("x"), "No such option: --colour") == "No such option: --colour"
    plain = ValueError("x")
    plain.__cause__ = ValueError("no errors() here")
    assert parser_words(plain, "Missing argument 'ID'.") == "Missing argument 'ID'."


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProc]:
    d = DaemonProc(tmp_path_factory.mktemp("firsthour3"), "--shutdown-grace", "1")
    yield d.start()
    d.stop()


def test_logs_of_a_job_that_has_not_run_says_when_and_that_f_waits(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc
) -> None:
    """`jobctl add --in 10m ...` then `jobctl logs N` read "job N has not run yet"."""
    job = daemon.client().enqueue(job_body(["true"], in_="10m"))
    code, out, err = run_cli(capsys, "logs", str(job["id"]), "--socket", str(daemon.socket))
    assert (code, out) == (2, "")
    n = job["id"]
    assert re.fullmatch(
        rf"jobctl: error: job {n} has not run yet: it is due .+ \(in (9|10) minutes\); "
        rf"'jobctl logs {n} -f' waits for it and follows its output\n",
        err,
    ), err


def test_logs_of_a_job_cancelled_before_it_ran_says_it_never_will(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc
) -> None:
    """It said "has not run yet" of a job that never will."""
    c = daemon.client()
    job = c.enqueue(job_body(["true"], in_="10m"))
    c.cancel(job["id"])
    code, out, err = run_cli(capsys, "logs", str(job["id"]), "--socket", str(daemon.socket))
    said = f"jobctl: error: job {job['id']} never ran: it was cancelled before it started\n"
    assert (code, out, err) == (2, "", said)
