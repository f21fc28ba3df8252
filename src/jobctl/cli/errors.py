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


def parser_words(exc: Exception, message: str) -> str:
    """The command-line parser's refusal of a value (``message``), with the value in it.

    Typer checks values with pydantic, whose words never show what was typed ("Invalid
    value for 'ID': Input should be a valid integer, unable to parse string as an
    integer"): a user who gave ``jobctl show`` the job's key, or ``#3``, was left to guess.
    ``exc`` is the parser's error; without pydantic's details the message stays as it is.
    """
    details = getattr(exc.__cause__, "errors", None)
    try:
        first = details()[0] if callable(details) else None
        typed, kind = first["input"], first["type"]  # type: ignore[index]
    except (TypeError, IndexError, KeyError):
        return message
    message = message.replace("Value error, ", "")
    if kind == "int_parsing":
        head = message.split(": ", 1)[0]
        message = f"{head}: '{typed}' is not a whole number"
        if getattr(getattr(exc, "param", None), "name", None) == "job_id":
            message += " (a job's id is the number 'jobctl add' printed; a --key is not an id)"
        return message
    return message.replace("Input should be", f"'{typed}' should be")


def fail(message: str) -> None:
    """Print the one-line error form to stderr."""
    first = " ".join(message.split())
    sys.stderr.write(f"jobctl: error: {first}\n")
