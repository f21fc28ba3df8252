"""The one exception tree of jobctl.

Every error jobctl raises on purpose derives from :class:`JobctlError`. Each class
carries a stable machine ``code`` (sent on the wire as ``{"error": {"code": ...}}``)
and the ids it concerns, so the API can map it to an HTTP status and the CLI to an
exit code, each in one table (``jobctl.api.errors`` and ``jobctl.cli.errors``)::

    JobctlError
    ├── InvalidInput            the caller sent something malformed (bad time, field, size)
    │   ├── InvalidSchedule     a cron expression, duration or time zone is not valid
    │   ├── HeaderTooLarge      the request's headers are over the daemon's limit
    │   └── WebhookUnverified   a webhook's signature, timestamp or headers do not verify
    ├── NotFound                no job / attempt / schedule with that id
    │   └── NotVisible          it exists but is another user's (answered as NotFound)
    ├── Forbidden               the caller may not do this at all (403)
    ├── Conflict                the request contradicts the stored state
    │   ├── KeyConflict         same job key, different body
    │   ├── IllegalTransition   the state machine does not allow that move
    │   └── LeaseLost           a heartbeat or completion carried a stale generation
    ├── Unavailable             the daemon refuses new work for now (answer: 503 + Retry-After)
    │   ├── DiskLow             free space is below the configured floor
    │   ├── StorageFull         a write met a full disk or an I/O error (nothing was written)
    │   ├── OutOfResources      the daemon ran out of descriptors or memory for this request
    │   └── StoreUnavailable    the database server cannot be reached (PostgreSQL down, cut off)
    ├── QuotaExceeded           the caller is over one of their quotas (429 + Retry-After)
    ├── DaemonUnavailable       the CLI cannot reach the daemon's socket
    │   └── TooManyConnections  the daemon refused a connection over its limits
    ├── DaemonLocked            another daemon already owns the database
    └── StoreError              the store failed (I/O, corruption, schema too new)
        ├── StoreCorrupt        the database file is damaged: refused at start, 503 at run time
        └── UnsafePath          a file or directory of the daemon is a symlink or not ours
"""

from __future__ import annotations

from typing import Any


class JobctlError(Exception):
    """Root of every deliberate jobctl error."""

    code = "error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class InvalidInput(JobctlError):
    code = "invalid_input"


class InvalidSchedule(InvalidInput):
    code = "invalid_schedule"


class HeaderTooLarge(InvalidInput):
    code = "header_too_large"


class WebhookUnverified(InvalidInput):
    code = "webhook_unverified"


class NotFound(JobctlError):
    code = "not_found"


class NotVisible(NotFound):
    """Another user's job or schedule: the caller is told exactly what a missing one tells
    (same code, same message), so ids leak nothing; only the server knows the difference
    (it marks the request as denied for the audit trail)."""


class Forbidden(JobctlError):
    """The caller may not use jobctl, or not this action (admins only, ``all_users``)."""

    code = "forbidden"


class Conflict(JobctlError):
    code = "conflict"


class KeyConflict(Conflict):
    code = "key_conflict"


class IllegalTransition(Conflict):
    code = "illegal_transition"


class LeaseLost(Conflict):
    code = "lease_lost"


class Unavailable(JobctlError):
    """the daemon refuses new work for now (disk space below its floor, or a write met a full disk); try again later."""  # noqa: E501

    code = "unavailable"


class DiskLow(Unavailable):
    code = "disk_low"


class StorageFull(Unavailable):
    code = "storage_full"


class OutOfResources(Unavailable):
    """A request met EMFILE, ENFILE, ENOMEM or EAGAIN (or SQLite could not open a file for
    it): transient, so 503 with ``Retry-After``, never a 500."""

    code = "out_of_resources"


class StoreUnavailable(Unavailable):
    """The database server cannot be reached for now (restarting, network cut): nothing
    of the request was acknowledged; 503 with ``Retry-After``, and ``status`` says so."""

    code = "store_unavailable"


class QuotaExceeded(JobctlError):
    """you are over one of your quotas (queued jobs, schedules, enqueue rate); try again later."""

    code = "quota_exceeded"


class DaemonUnavailable(JobctlError):
    code = "daemon_unavailable"


class TooManyConnections(DaemonUnavailable):
    """Sent by the daemon's connection limits (``max_connections*``), with ``Retry-After``."""

    code = "too_many_connections"


class DaemonLocked(JobctlError):
    code = "daemon_locked"


class StoreError(JobctlError):
    code = "store_error"


class StoreCorrupt(StoreError):
    """The database file is damaged or is no database: the daemon does not start on it,
    or, found while running, the degraded daemon refuses the write (docs/operations.md)."""

    code = "store_corrupt"


class UnsafePath(StoreError):
    code = "unsafe_path"
