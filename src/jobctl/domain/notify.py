"""Failure notification, like cron's ``MAILTO`` and systemd's ``OnFailure=``: what runs
when a job ends ``dead``, and what it is told (pure; engine/notifier.py runs it).

A job's notifier is, first found: its own ``on_failure``, its queue's (set with
``jobctl queues set --on-failure``, else the config's ``notify.queues`` table), the
daemon's ``notify.on_failure`` (domain/queue_defaults.py). A mail goes out too when
``MAILTO`` is set (the job's environment, else the config's ``notify.mailto``; an empty
``MAILTO`` turns mail off, as in cron) and a ``sendmail`` binary is found.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.policy import SMTP

from jobctl.domain.models import Job
from jobctl.domain.queue_defaults import notifier

#: Bytes of the failed attempt's output tail handed to a notifier (and put in a mail).
TAIL_BYTES = 4096
#: Seconds a notifier may run before it is stopped (its own tree, like a timeout).
NOTIFY_TIMEOUT = 60.0
#: Where ``sendmail`` is looked for after the job's ``PATH``.
SENDMAIL_DIRS = ("/usr/sbin", "/usr/lib", "/usr/bin", "/sbin")
#: The notifier command of a mail: the message in ``$JOBCTL_MAIL``, piped to sendmail.
MAIL_SCRIPT = 'printf "%s\\n" "$JOBCTL_MAIL" | "$JOBCTL_SENDMAIL" -t'


@dataclass(frozen=True)
class NotifyDefaults:
    """The daemon's part of failure notification (config keys ``notify.*``)."""

    on_failure: str | None = None
    queues: Mapping[str, str] = field(default_factory=dict)
    mailto: str | None = None

    def command_of(self, job: Job, queue_set: str | None = None) -> str | None:
        """The notifier command line of ``job``: its own, its queue's (``queue_set``: the
        one set through the API, then the config's), the daemon's."""
        return self.resolve(job, queue_set)[0]

    def resolve(self, job: Job, queue_set: str | None) -> tuple[str | None, str | None]:
        """The notifier command line of ``job`` and where it comes from, for ``show``."""
        spec = job.spec
        return notifier(spec.on_failure, spec.queue, queue_set, dict(self.queues), self.on_failure)

    def mailto_of(self, job: Job) -> str | None:
        """Whom to mail (``MAILTO``: the job's, else the daemon's); None: no mail."""
        to = dict(job.spec.env).get("MAILTO", self.mailto)  # MAILTO="": no mail, as in cron
        return (to.strip() or None) if to else None


@dataclass(frozen=True)
class Failure:
    """What a notifier is told about the job that ended dead."""

    job: Job
    exit_code: int | None
    error: str | None
    tail: str
    log_path: str

    def env(self) -> dict[str, str]:
        """The ``JOBCTL_FAILED_*`` variables (docs/operations.md lists them)."""
        job = self.job
        return {
            "JOBCTL_FAILED_JOB_ID": str(job.id),
            "JOBCTL_FAILED_JOB_KEY": job.key,
            "JOBCTL_FAILED_QUEUE": job.spec.queue,
            "JOBCTL_FAILED_COMMAND": shlex.join(job.spec.command),
            "JOBCTL_FAILED_EXIT_CODE": "" if self.exit_code is None else str(self.exit_code),
            "JOBCTL_FAILED_DEAD_REASON": job.dead_reason or "",
            "JOBCTL_FAILED_ERROR": _clean(self.error or ""),
            "JOBCTL_FAILED_ATTEMPT": str(job.attempt),
            "JOBCTL_FAILED_MAX_ATTEMPTS": str(job.spec.max_attempts),
            "JOBCTL_FAILED_OUTPUT_TAIL": _clean(self.tail),
            "JOBCTL_FAILED_LOG": self.log_path,
            "JOBCTL_NOTIFY": "1",
        }

    def subject(self) -> str:
        job = self.job
        code = "" if self.exit_code is None else f", exit code {self.exit_code}"
        return f"jobctl: job {job.id} ({_clean_line(job.key)}) failed: {job.dead_reason}{code}"

    def mail(self, to: str, sender: str) -> str:
        """A whole message for ``sendmail -t``: headers naming the job, the tail as body."""
        msg = EmailMessage(policy=SMTP.clone(linesep="\n"))
        msg["To"] = _clean_line(to)
        msg["From"] = _clean_line(sender)
        msg["Subject"] = self.subject()
        msg["Auto-Submitted"] = "auto-generated"
        msg["X-Jobctl-Job-Id"] = str(self.job.id)
        msg.set_content(self._body())
        return msg.as_string()

    def _body(self) -> str:
        job = self.job
        lines = [
            f"Job {job.id} ended dead ({job.dead_reason}).",
            f"Key: {job.key}",
            f"Queue: {job.spec.queue}",
            f"Command: {shlex.join(job.spec.command)}",
            f"Attempt: {job.attempt} of {job.spec.max_attempts}",
            f"Exit code: {'-' if self.exit_code is None else self.exit_code}",
            f"Error: {self.error or '-'}",
            f"Log: {self.log_path}",
            "",
            f"Last output (up to {TAIL_BYTES} bytes):",
            _clean(self.tail) or "(none)",
        ]
        return "\n".join(lines) + "\n"


def _clean(text: str) -> str:
    """Text an environment variable can hold: no NUL, at most :data:`TAIL_BYTES` chars."""
    return text.replace("\0", "")[-TAIL_BYTES:]


def _clean_line(text: str) -> str:
    """One header line: no line breaks (no header injection through a key or MAILTO)."""
    return " ".join(text.replace("\0", "").split())
