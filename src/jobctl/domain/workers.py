"""Payload jobs and the queues pull workers serve (issue 16, docs/workers.md).

A payload job carries a JSON ``payload`` instead of a command or a request: nothing runs
on the daemon's host; a worker process leases it over the API (``POST /v1/leases``),
heartbeats its lease and completes or fails it with the lease's generation.

Which runner serves a job is a property of its **queue**, not of each job: a queue is a
*worker queue* once it holds payload jobs (the first payload job marks it, in the
inserting transaction), and then takes payload jobs only; a queue with command or http
jobs waiting or running takes no payload job. Why the queue: claims already go lane by
lane (queue, owner) through ``job_counts``, so the executor leaves the worker queues'
lanes out and a lease takes only theirs, at the cost of one read of the small ``queues``
table, whatever the backlog (no new index, no scan of jobs of the other kind).

Who may lease a worker queue's jobs: each job's owner, admins, and the users and groups
the queue's ``workers`` list names (``uid:N``, ``gid:N``), set by an admin.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from jobctl.errors import InvalidInput

#: A payload's size limit as compact JSON (UTF-8 bytes): the size of a command's limit.
MAX_PAYLOAD_BYTES = 64 * 1024
#: Longest a worker may ask a lease request to wait for work (seconds).
MAX_WAIT = 60.0
#: Most jobs one lease request may take.
MAX_LEASES = 100
#: Entries a queue's ``workers`` list may hold.
MAX_ALLOW = 64
#: A lease lasts this long unless the worker asks otherwise; heartbeats come 3x as often.
DEFAULT_LEASE_TTL = 30.0
MIN_LEASE_TTL = 1.0
MAX_LEASE_TTL = 3600.0
#: The attempt keeps the first this many bytes of a completion's ``result`` (as JSON).
MAX_RESULT_BYTES = 4096
#: Prefix of a worker lease's ``lease_owner``: ``@worker:UID``. Not a host name (a
#: daemon's owner is ``host:…``): start-up recovery, which reclaims the leases of this
#: host's dead daemons, must leave a worker's lease to run out.
WORKER_OWNER_PREFIX = "@worker:"


def payload_text(value: object) -> str:
    """The stored form of a payload: compact JSON, sorted keys (so a keyed re-send of the
    same payload is the same body), at most :data:`MAX_PAYLOAD_BYTES`."""
    try:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"payload must be JSON: {exc}") from None
    check_payload_text(text)
    _check_ints(value)
    return text


#: Numbers a payload may hold: strictly inside +-2^53 (JavaScript's safe integers), what
#: every JSON reader keeps exactly (and
#: what the daemon's own encoders render; the OpenAPI document says the same).
MAX_PAYLOAD_NUMBER = 2**53


def _check_ints(value: object) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        if not -MAX_PAYLOAD_NUMBER < value < MAX_PAYLOAD_NUMBER:
            raise InvalidInput(
                f"payload: numbers must be within +-{MAX_PAYLOAD_NUMBER - 1} (2^53-1)"
            )
    elif isinstance(value, dict):
        for v in value.values():
            _check_ints(v)
    elif isinstance(value, list):
        for v in value:
            _check_ints(v)


def check_payload_text(text: str) -> None:
    if len(text.encode("utf-8", "surrogatepass")) > MAX_PAYLOAD_BYTES:
        raise InvalidInput(f"payload must be at most {MAX_PAYLOAD_BYTES} bytes as JSON")
    if "\x00" in text:
        raise InvalidInput("payload: text holds a NUL byte")


def worker_owner(uid: int) -> str:
    """The ``lease_owner`` of a job a worker acting as ``uid`` leased."""
    return f"{WORKER_OWNER_PREFIX}{uid}"


def parse_allow(entries: Iterable[str]) -> tuple[str, ...]:
    """A queue's ``workers`` list: ``uid:N`` and ``gid:N`` entries, sorted, unique."""
    out = set()
    for entry in entries:
        kind, _, num = entry.partition(":")
        if kind not in ("uid", "gid") or not num.isdigit() or len(num) > 10:
            raise InvalidInput(f"workers entry {entry!r}: give uid:N or gid:N")
        out.add(f"{kind}:{int(num)}")
    if len(out) > MAX_ALLOW:
        raise InvalidInput(f"at most {MAX_ALLOW} workers entries")
    return tuple(sorted(out))


@dataclass(frozen=True, slots=True)
class Lessee:
    """Who asks for work: the caller's uid, whether an admin, and their groups."""

    uid: int
    admin: bool = False
    gids: frozenset[int] = frozenset()

    def may_lease_all(self, allow: Sequence[str]) -> bool:
        """Whether this caller may take every owner's jobs of a queue with this list (else
        only their own)."""
        if self.admin or f"uid:{self.uid}" in allow:
            return True
        return any(f"gid:{g}" in allow for g in self.gids)


def lease_lanes(
    lanes: dict[tuple[str, int], int],
    wanted: Sequence[str],
    worker_queues: dict[str, tuple[str, ...]],
    lessee: Lessee,
) -> dict[tuple[str, int], int]:
    """The due lanes a lease may take from: of the asked worker queues, every owner's
    where the lessee may lease all, else the lessee's own."""
    asked = set(wanted)
    out = {}
    for (queue, owner), n in lanes.items():
        if queue not in asked or queue not in worker_queues:
            continue
        if owner == lessee.uid or lessee.may_lease_all(worker_queues[queue]):
            out[(queue, owner)] = n
    return out


def executor_lanes(
    lanes: dict[tuple[str, int], int], worker_queues: dict[str, tuple[str, ...]]
) -> dict[tuple[str, int], int]:
    """The due lanes the daemon's executor serves: every queue but the worker queues."""
    if not worker_queues:
        return lanes
    return {lane: n for lane, n in lanes.items() if lane[0] not in worker_queues}


def result_text(result: object) -> str:
    """A completion's result as the attempt keeps it (its output tail): JSON, cut."""
    if result is None:
        return ""
    try:
        text = json.dumps(result, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"result must be JSON: {exc}") from None
    return text.encode()[:MAX_RESULT_BYTES].decode(errors="ignore")


__all__ = [
    "DEFAULT_LEASE_TTL",
    "MAX_LEASES",
    "MAX_PAYLOAD_BYTES",
    "MAX_WAIT",
    "Lessee",
    "check_payload_text",
    "executor_lanes",
    "lease_lanes",
    "parse_allow",
    "payload_text",
    "result_text",
    "worker_owner",
]
