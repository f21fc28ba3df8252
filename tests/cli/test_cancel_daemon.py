"""``jobctl cancel`` against a real daemon: one request, and the same words as before.

It read the job first (GET) to tell "cancelled now" from "was already cancelled" and to
refuse an ended job itself; the cancel's answer now says both (``already_cancelled``,
and a 409 that carries the job's ``status``), so the GET is gone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobctl.cli.bodies import job_body
from jobctl.cli.main import run
from jobctl.client.transport import UnixTransport
from tests.integration.conftest import DaemonProc


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProc]:
    d = DaemonProc(tmp_path_factory.mktemp("cancel"), "--shutdown-grace", "1", "--kill-grace", "1")
    yield d.start()
    d.stop()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(method, path) of every request sent on the real transport (the test's own client's
    too: a test clears it before the command it counts)."""
    seen: list[tuple[str, str]] = []
    real = UnixTransport.request

    def request(
        self: UnixTransport, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        seen.append((method, path))
        return real(self, method, path, body, headers)

    monkeypatch.setattr(UnixTransport, "request", request)
    return seen


def cancel(
    capsys: pytest.CaptureFixture[str], d: DaemonProc, job_id: int, *flags: str
) -> tuple[int, str, str]:
    code = run(["cancel", str(job_id), "--socket", str(d.socket), *flags])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_scheduled_job_then_again_one_request_each(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, sent: list[tuple[str, str]]
) -> None:
    job = daemon.client().enqueue(job_body(["true"], in_="1h"))
    sent.clear()
    post = ("POST", f"/v1/jobs/{job['id']}/cancel")
    assert cancel(capsys, daemon, job["id"]) == (0, f"job {job['id']} cancelled\n", "")
    assert sent == [post]  # was: GET /v1/jobs/N first
    assert cancel(capsys, daemon, job["id"]) == (0, f"job {job['id']} was already cancelled\n", "")
    assert sent == [post, post]


def test_json_prints_the_job_without_the_answers_flag(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, sent: list[tuple[str, str]]
) -> None:
    job = daemon.client().enqueue(job_body(["true"], in_="1h"))
    sent.clear()
    code, out, err = cancel(capsys, daemon, job["id"], "--json")
    now = json.loads(out)
    assert (code, err, now["status"], len(sent)) == (0, "", "cancelled", 1)
    assert "already_cancelled" not in now and "attempts" not in now
    code, out, err = cancel(capsys, daemon, job["id"], "--json")
    again = json.loads(out)  # the same job, unchanged (was: the detail view, with attempts)
    assert (code, err, again, len(sent)) == (0, "", now, 2)


@pytest.mark.parametrize(("command", "status"), [(["true"], "succeeded"), (["false"], "dead")])
def test_an_ended_job_is_refused_in_the_same_words_exit_4(
    capsys: pytest.CaptureFixture[str],
    daemon: DaemonProc,
    sent: list[tuple[str, str]],
    tmp_path: Path,
    command: list[str],
    status: str,
) -> None:
    job = daemon.client().enqueue(job_body(command, max_attempts=1, cwd=tmp_path))
    line = daemon.wait_for_line(f" job={job['id']} attempt=1 outcome=")
    assert f"status={status}" in line
    sent.clear()
    said = f"jobctl: error: job {job['id']} already ended ({status}): nothing to cancel\n"
    assert cancel(capsys, daemon, job["id"]) == (4, "", said)
    assert sent == [("POST", f"/v1/jobs/{job['id']}/cancel")]


def test_an_unknown_id_is_not_found_in_one_request(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, sent: list[tuple[str, str]]
) -> None:
    assert cancel(capsys, daemon, 999_999) == (3, "", "jobctl: error: no job 999999\n")
    assert sent == [("POST", "/v1/jobs/999999/cancel")]
