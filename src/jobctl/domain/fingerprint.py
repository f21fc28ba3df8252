"""The fingerprint of a job body: what idempotent enqueue compares (versioned, canonical)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Protocol

from jobctl.domain.jobcheck import _JobFields
from jobctl.domain.resources import Resources

if TYPE_CHECKING:
    from jobctl.domain.models import Backoff
    from jobctl.domain.resources import Resources


#: The version of :func:`fingerprint_of`: the prefix of every fingerprint it makes. A
#: stored fingerprint without it was made by an older rule (before 0.x: a digest of a
#: positional list whose length grew with the fields); the store compares such a job by
#: the fields of its row instead (:func:`jobctl.store.jobrow.same_body`).
FINGERPRINT_VERSION = "2"
_FP_PREFIX = FINGERPRINT_VERSION + ":"


def is_current_fingerprint(fingerprint: str) -> bool:
    """Whether ``fingerprint`` was made by today's :func:`fingerprint_of`."""
    return fingerprint.startswith(_FP_PREFIX)


class _BodyFields(_JobFields, Protocol):
    @property
    def backoff(self) -> Backoff: ...
    @property
    def retry_on(self) -> tuple[int, ...] | None: ...
    @property
    def no_retry_on(self) -> tuple[int, ...]: ...
    @property
    def resources(self) -> Resources | None: ...


def fingerprint_fields(
    job: _BodyFields, owner_uid: int, schedule_id: str | None
) -> dict[str, object]:
    """The fields a fingerprint covers, by name, in the form the store keeps them (times
    in whole milliseconds, exit codes as lists, the environment sorted), so the same
    fields come back from a stored row (:func:`jobctl.store.jobrow.row_fingerprint`).
    ``resources`` and ``on_failure`` are there only when set, so a job without them keeps
    the digest it had before they existed."""
    fields: dict[str, object] = {
        "backoff_base_ms": int(round(job.backoff.base * 1000)),
        "backoff_cap_ms": int(round(job.backoff.cap * 1000)),
        "command": list(job.command),
        "cwd": job.cwd,
        "env": sorted(job.env),
        "max_attempts": job.max_attempts,
        "no_retry_on": list(job.no_retry_on),
        "owner_uid": owner_uid,
        "priority": job.priority,
        "queue": job.queue,
        "retry_on": None if job.retry_on is None else list(job.retry_on),
        "schedule_id": schedule_id,
        "timeout_ms": None if job.timeout is None else int(round(job.timeout * 1000)),
    }
    if job.resources:
        fields["resources"] = job.resources.to_json()
    if job.on_failure is not None:
        fields["on_failure"] = job.on_failure
    if job.http is not None:
        fields["http"] = job.http.to_json()
    if job.payload is not None:
        fields["payload"] = job.payload
    return fields


def fingerprint_of(fields: dict[str, object]) -> str:
    """The canonical fingerprint of a job body: ``"2:"`` and 32 hex digits of SHA-256 over
    the fields as compact JSON with sorted keys, ASCII only.

    Why canonical and versioned: a stored fingerprint must stay comparable across
    releases and backends. Named fields (not positions) and a fixed rendering mean a new
    field changes no old digest unless it is set; the version says which rule made it
    (a test pins a literal value, so the rule cannot drift unnoticed).
    """
    return _FP_PREFIX + _digest(_canonical(fields))


def _canonical(fields: dict[str, object]) -> str:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]
