"""Failure notification, the pure part (domain/notify.py): which notifier a job gets, whom
it mails, what the notifier's environment and the mail say (issue 12)."""

from __future__ import annotations

import email
from datetime import UTC, datetime

from jobctl.domain.models import Job, JobSpec
from jobctl.domain.notify import Failure, NotifyDefaults
from jobctl.domain.states import JobStatus
from jobctl.engine.logcap import layout, note

T = datetime(2027, 3, 14, 6, 0, tzinfo=UTC)


def dead(**spec: object) -> Job:
    fields: dict[str, object] = {"command": ("./backup.sh", "--full"), "run_at": T, "owner_uid": 0}
    s = JobSpec(**(fields | spec))  # type: ignore[arg-type]
    return Job(7, "nightly\r\nBcc: x@evil", s, JobStatus.DEAD, T, T, 3, 3, 3, None, None, T,
               "exit code 2", "max_attempts")  # fmt: skip


def test_the_jobs_own_notifier_wins_then_its_queues_then_the_daemons() -> None:
    d = NotifyDefaults("daemon-cmd", {"reports": "queue-cmd"}, None)
    assert d.command_of(dead(on_failure="own")) == "own"
    assert d.command_of(dead(queue="reports")) == "queue-cmd"
    assert d.command_of(dead()) == "daemon-cmd"
    assert NotifyDefaults().command_of(dead()) is None


def test_mailto_of_the_job_then_the_daemon_and_empty_turns_it_off() -> None:
    d = NotifyDefaults(mailto="ops@example.com")
    assert d.mailto_of(dead()) == "ops@example.com"
    assert d.mailto_of(dead(env=(("MAILTO", "me@example.com"),))) == "me@example.com"
    assert d.mailto_of(dead(env=(("MAILTO", ""),))) is None
    assert NotifyDefaults().mailto_of(dead()) is None


def test_the_environment_names_the_failure() -> None:
    env = Failure(dead(), 2, "exit code 2", "out\0put", "/l/7.3.log").env()
    assert env["JOBCTL_FAILED_JOB_ID"] == "7"
    assert env["JOBCTL_FAILED_EXIT_CODE"] == "2"
    assert env["JOBCTL_FAILED_DEAD_REASON"] == "max_attempts"
    assert env["JOBCTL_FAILED_ATTEMPT"] == "3"
    assert env["JOBCTL_FAILED_COMMAND"] == "./backup.sh --full"
    assert env["JOBCTL_FAILED_OUTPUT_TAIL"] == "output"  # no NUL in an environment
    assert Failure(dead(), None, None, "", "").env()["JOBCTL_FAILED_EXIT_CODE"] == ""


def test_the_mail_is_one_message_and_a_key_cannot_add_headers() -> None:
    text = Failure(dead(), 2, "exit code 2", "last words\n", "/l/7.3.log").mail(
        "ops@example.com\nBcc: y@evil", "jobctl@host"
    )
    msg = email.message_from_string(text)
    assert msg["Bcc"] is None
    assert msg["Subject"].startswith("jobctl: job 7 (nightly Bcc: x@evil) failed: max_attempts")
    assert "last words" in msg.get_payload() and "Exit code: 2" in msg.get_payload()


def test_the_log_cut_layout() -> None:
    cap = 1 << 20
    assert layout(cap, 4096) == (cap // 4, cap - cap // 4)
    assert layout(5000, 4096) is None  # too small to keep a head and a tail: head only
    assert len(note(cap, 0)) == len(note(cap, 10**15))  # rewritten in place
