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


def fail(message: str) -> None:
    """Print the one-line error form to stderr."""
    first = " ".join(message.split())
    sys.stderr.write(f"jobctl: error: {first}\n")
