"""Errors to exit codes: the one table. Every error prints ``jobctl: error: ...`` once."""

from __future__ import annotations

import sys

from jobctl import errors

USAGE = 2
#: An unexpected exception: a bug in jobctl (run() prints it as one line too).
INTERNAL = 1
#: sysexits.h EX_NOPERM: the daemon refused the caller.
NO_PERMISSION = 77

#: Most specific first; the first class an error is an instance of wins.
EXIT_CODES: list[tuple[type[errors.JobctlError], int]] = [
    (errors.InvalidInput, USAGE),
    (errors.NotFound, 3),
    (errors.Forbidden, NO_PERMISSION),
    (errors.Conflict, 4),
    (errors.DaemonUnavailable, 5),
    (errors.DaemonLocked, 6),
    (errors.StoreCorrupt, 11),
    (errors.StoreError, 7),
    (errors.Unavailable, 9),
    (errors.QuotaExceeded, 10),
    (errors.JobctlError, 1),
]


def exit_code_for(exc: errors.JobctlError) -> int:
    return next(code for cls, code in EXIT_CODES if isinstance(exc, cls))


#: The daemon's names for what the user typed as a positional argument.
_ARGUMENTS = {
    "path.job_id": "ID",
    "path.number": "ATTEMPT",
    "path.name": "NAME",
    "path.ref": "SCHEDULE",
    "command": "COMMAND",
}
#: Fields of a job or schedule body that the CLI fills from the option of the same name.
_OPTIONS = frozenset(
    [
        "queue",
        "priority",
        "key",
        "max_attempts",
        "timeout",
        "backoff",
        "retry_on",
        "no_retry_on",
        "nice",
        "memory_max",
        "cpu_quota",
        "on_failure",
        "cwd",
        "env",
        "tz",
        "name",
        "jitter",
        "misfire",
        "catch_up_limit",
        "overlap",
        "cron",
        "every",
        "payload",
        "http",
    ]
)


def user_words(exc: errors.JobctlError) -> str:
    """The daemon's refusal of a request with its field paths (``path.job_id``,
    ``job.priority``) put as the user typed them (``ID``, ``--priority``): the user never
    saw the JSON the CLI sent. A path the CLI did not fill (an item of a batch file) stays."""
    if not isinstance(exc, errors.InvalidInput) or "http_status" not in exc.details:
        return exc.message
    words = []
    for problem in exc.message.split("; "):
        field, sep, rest = problem.partition(": ")
        flag = _flag(field) if sep else None
        words.append(f"{flag}: {rest}" if flag else problem)
    return "; ".join(words)


def _flag(field: str) -> str | None:
    if field in _ARGUMENTS:
        return _ARGUMENTS[field]
    head = field.removeprefix("job.").removeprefix("query.").split(".", 1)[0]
    if head == "run_at":
        return "--at/--in"
    if head in _OPTIONS or field.startswith("query."):
        return "--" + head.replace("_", "-")
    return None


def fail(message: str) -> None:
    """Print the one-line error form to stderr."""
    first = " ".join(message.split())
    sys.stderr.write(f"jobctl: error: {first}\n")
