"""Webhook jobs through a real daemon and the real CLI (issue 16): ``secrets create``,
``add --http``, a receiver on 127.0.0.1 (allowed by this daemon's config), ``show``, and
``webhook verify`` of the captured request. A daemon left at its defaults refuses it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import DaemonProc, daemon_env, wait_until
from tests.webhooks.receiver import ThreadReceiver

ALLOW = {"JOBCTL_HTTP_ALLOW_NETWORKS": "127.0.0.0/8"}


def cli(d: DaemonProc, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = daemon_env() | {"JOBCTL_SOCKET": str(d.socket)}
    return subprocess.run([sys.executable, "-m", "jobctl", *args], env=env, capture_output=True,
                          text=True, timeout=60, cwd="/", input=stdin)  # fmt: skip


@pytest.fixture
def receiver() -> Iterator[ThreadReceiver]:
    rec = ThreadReceiver()
    yield rec
    rec.close()


def _status(d: DaemonProc, job_id: str) -> dict[str, object]:
    found: dict[str, object] = json.loads(cli(d, "show", job_id, "--json").stdout)
    return found


def test_a_signed_webhook_is_delivered_shown_and_verified(
    make_daemon: Callable[..., DaemonProc], receiver: ThreadReceiver, tmp_path: Path
) -> None:
    d = make_daemon(env=ALLOW)
    secret = cli(d, "secrets", "create").stdout.strip()
    assert secret.startswith("whsec_")
    (tmp_path / "body.json").write_text('{"report": "daily"}')
    added = cli(d, "add", "--http", "POST", receiver.url + "/hook", "--header", "X-Team: ops",
                "--data", f"@{tmp_path / 'body.json'}", "--key", "daily-1")  # fmt: skip
    assert added.returncode == 0, added.stderr
    job_id = added.stdout.strip()
    wait_until(lambda: _status(d, job_id)["status"] == "succeeded", what="the delivery")
    [raw] = receiver.raw
    assert b"x-team: ops" in raw.lower() and raw.endswith(b'{"report": "daily"}')
    assert b"webhook-id: daily-1" in raw.lower()
    (tmp_path / "req").write_bytes(raw)
    ok = cli(d, "webhook", "verify", "--secret", secret, "--request", str(tmp_path / "req"))
    assert (ok.returncode, ok.stdout.strip()) == (0, "verified"), ok.stderr
    (tmp_path / "bad").write_bytes(raw[:-2] + b"!}")
    bad = cli(d, "webhook", "verify", "--secret", secret, "--request", str(tmp_path / "bad"))
    assert bad.returncode != 0 and bad.stderr.startswith("jobctl: error: no signature")
    assert bad.stderr.count("\n") == 1
    shown = cli(d, "show", job_id).stdout
    assert f"POST {receiver.url}/hook" in shown and "HTTP 200 in" in shown
    assert cli(d, "logs", job_id).stdout == "ok"  # the answer's first 4 KiB
    assert secret not in "".join(d.log)  # never logged
    listed = cli(d, "secrets", "list").stdout
    assert "default" in listed and secret not in listed


def test_bad_http_options_are_one_error_line(daemon: DaemonProc) -> None:
    for args in (
        ["--data", "x", "--", "true"],
        ["--http", "POST", "ftp://example.com/x"],
        ["--http", "POST", "https://example.com/x", "--header", "nocolon"],
        ["--http", "POST", "https://example.com/x", "--retry-on", "500"],
        ["--http", "POST", "https://example.com/x", "--", "true"],
    ):
        out = cli(daemon, "add", *args)
        assert out.returncode != 0 and out.stderr.startswith("jobctl: error:"), (args, out)
        assert out.stderr.count("\n") == 1, out.stderr


def test_loopback_is_refused_by_a_default_daemon(
    daemon: DaemonProc, receiver: ThreadReceiver
) -> None:
    added = cli(daemon, "add", "--http", "GET", receiver.url + "/x", "--max-attempts", "5")
    job_id = added.stdout.strip()
    wait_until(lambda: _status(daemon, job_id)["status"] == "dead", what="the refusal")
    job = _status(daemon, job_id)
    assert job["dead_reason"] == "non_retryable" and "loopback" in str(job["last_error"])
    assert not receiver.raw


def test_an_http_schedule_is_made_and_shown(daemon: DaemonProc) -> None:
    made = cli(daemon, "add", "--cron", "0 6 * * *", "--tz", "Asia/Tokyo", "--http", "post",
               "https://hooks.example/run", "--data", "-", stdin='{"a": 1}')  # fmt: skip
    assert made.returncode == 0, made.stderr
    shown = cli(daemon, "schedules", "show", made.stdout.strip()).stdout
    assert "POST https://hooks.example/run" in shown
