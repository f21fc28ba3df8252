"""Queues, fair claims and the dead-letter queue in the SQLite store (a part of SqliteStore).

A claim promotes jobs whose time has come into the due bucket, reads the due lanes
(queue, owner) from the exact counters, asks :func:`jobctl.domain.dispatch.plan_claims`
how many each lane may start under its queue's pause, concurrency, rate and weight, and
takes that many from each lane's index in dispatch order — all in one transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from jobctl.domain import resources as res
from jobctl.domain.dispatch import (
    Bucket,
    QueuePolicy,
    allowance,
    plan_claims,
)
from jobctl.domain.models import Claim, Job, JobSpec
from jobctl.domain.quota import Limits, refuse_over
from jobctl.domain.resources import Resources
from jobctl.domain.states import JobStatus, Op, check_transition
from jobctl.domain.workers import Lessee, executor_lanes, lease_lanes, worker_owner
from jobctl.errors import Conflict, JobctlError
from jobctl.store import rows
from jobctl.store.claims import ClaimRows, claims_in_order, row_dicts
from jobctl.store.jobrow import job_from_row
from jobctl.store.queries import q
from jobctl.store.rows import RowLike
from jobctl.store.schedconn import SqliteSchedConn
from jobctl.store.workerq import worker_queues

if TYPE_CHECKING:
    from jobctl.store.sqlitedb import SqliteDb

#: How many future jobs one claim moves into the due bucket at most: bounds how long one
#: claim holds the writer (about 40-90 ms for 1,000 on 2 cores) during an overdue backlog.
PROMOTE_BATCH = 1_000


class QueueOps:
    """Queue and DLQ methods of the store contract, on one :class:`SqliteDb`."""

    def __init__(self, db: SqliteDb) -> None:
        self.db = db

    def claim_due(self, owner: str, limit: int, lease_ttl: float) -> list[Claim]:
        # Rows to Claims in the caller's thread, after the commit: the writer is free to
        # start the next transaction meanwhile.
        found, defaults = self.submit_claim_rows(owner, limit, lease_ttl).result()
        return claims_in_order(found, defaults)

    def submit_claim_rows(self, owner: str, limit: int, lease_ttl: float) -> Future[ClaimRows]:
        """:meth:`claim_due`'s rows and queue limits without waiting (for
        :func:`claims_in_order`): the daemon's timer awaits this future from its loop, no
        pool thread parked on it."""
        return self.db.submit(lambda conn: _claim_tx(self.db, conn, owner, limit, lease_ttl))

    def lease(
        self, queues: Sequence[str], lessee: Lessee, limit: int, lease_ttl: float
    ) -> list[Claim]:
        """A worker's lease (docs/workers.md): due payload jobs of the asked worker
        queues, as a claim takes them (fairness, queue limits), leased to the worker."""

        def keep(conn: sqlite3.Connection, lanes: Lanes) -> Lanes:
            return lease_lanes(lanes, queues, _worker_queues(conn), lessee)

        found, defaults = self.db.write(
            lambda conn: _claim_tx(self.db, conn, worker_owner(lessee.uid), limit, lease_ttl, keep)
        )
        # Rows to Claims in the caller's thread, after the commit.
        return claims_in_order(found, defaults)

    def promote_due(self, limit: int) -> int:
        def tx(conn: sqlite3.Connection) -> int:
            params = {"now": rows.to_ms(self.db.clock.now()), "limit": limit}
            return conn.execute(q("promote_due"), params).rowcount

        return self.db.write(tx)

    def queues(self) -> list[tuple[QueuePolicy, float | None]]:
        """Configured queues with their current tokens (None when not rate limited)."""

        def read(conn: sqlite3.Connection) -> list[tuple[QueuePolicy, float | None]]:
            now = self.db.clock.now()
            out = []
            for policy, bucket in _queue_rows(conn).values():
                tokens = None
                if policy.rate is not None:
                    tokens = bucket.refill(policy.rate, policy.burst, now)
                out.append((policy, tokens))
            return out

        return self.db.read(read)

    def set_queue(self, policy: QueuePolicy) -> QueuePolicy:
        """Create or change a queue's limits (a queue needs no row to accept jobs)."""

        def tx(conn: sqlite3.Connection) -> QueuePolicy:
            params = queue_params(policy, rows.to_ms(self.db.clock.now()))
            return policy_of(conn.execute(q("upsert_queue"), params).fetchone())

        return self.db.write(tx)

    def queue_policy(self, name: str) -> QueuePolicy:
        """The queue's limits, or the unlimited default for a queue without settings."""

        def read(conn: sqlite3.Connection) -> QueuePolicy:
            row = conn.execute(q("queue_by_name"), {"name": name}).fetchone()
            return QueuePolicy(name) if row is None else policy_of(row)

        return self.db.read(read)

    def list_dead(
        self,
        queue: str | None,
        reason: str | None,
        since: datetime | None,
        limit: int,
        owner: int | None = None,
        before: tuple[datetime, int] | None = None,
    ) -> list[Job]:
        """Most recent deaths first; ``before`` (finished_at, id) is a page's keyset cursor."""
        at, job_id = (2**62, 2**62) if before is None else (rows.to_ms(before[0]), before[1])
        params = _dead_params(queue, reason, since, limit) | {
            "owner": owner,
            "before_at": at,
            "before_id": job_id,
        }
        return self.db.read(
            lambda conn: [job_from_row(r) for r in conn.execute(q("list_dead"), params)]
        )

    def purge_dead(
        self, older_than: datetime, limit: int, owner: int | None = None
    ) -> tuple[int, list[str]]:
        """Delete dead jobs that died before ``older_than``; return the count and log files."""

        def tx(conn: sqlite3.Connection) -> tuple[int, list[str]]:
            params = {"before": rows.to_ms(older_than), "limit": limit, "owner": owner}
            logs = [r["log_path"] for r in conn.execute(q("purge_dead_logs"), params)]
            deleted = conn.execute(q("purge_dead"), params).fetchall()
            return len(deleted), logs

        return self.db.write(tx)


def _dead_params(
    queue: str | None, reason: str | None, since: datetime | None, limit: int
) -> dict[str, Any]:
    return {
        "queue": queue,
        "reason": reason,
        "limit": limit,
        "since": rows.to_ms(since) if since else 0,
    }


def policy_of(row: RowLike) -> QueuePolicy:
    """A stored queue row (either backend) as its policy and defaults."""
    return QueuePolicy(
        row["name"],
        row["concurrency"],
        row["rate"],
        row["burst"],
        row["weight"],
        bool(row["paused"]),
        res.from_text(row["resources"]),
        row["on_failure"],
    )


def queue_params(policy: QueuePolicy, now_ms: int) -> dict[str, Any]:
    """The parameters of ``upsert_queue`` (either backend)."""
    return {
        "name": policy.name,
        "concurrency": policy.concurrency,
        "rate": policy.rate,
        "burst": policy.burst,
        "weight": policy.weight,
        "paused": int(policy.paused),
        "now": now_ms,
        "resources": res.to_text(policy.resources),
        "on_failure": policy.on_failure,
    }


def queue_limits(policies: Iterable[QueuePolicy]) -> dict[str, Resources]:
    """The resource limits of the queues that give some, by name: what a claim fills in
    for jobs that give none (:func:`jobctl.domain.queue_defaults.with_queue_limits`)."""
    return {p.name: p.resources for p in policies if p.resources}


def _queue_rows(conn: sqlite3.Connection) -> dict[str, tuple[QueuePolicy, Bucket]]:
    return {
        r["name"]: (policy_of(r), Bucket(r["tokens"], rows.ms_to_dt(r["tokens_at"])))
        for r in conn.execute(q("all_queues"))
    }


class Allowances(NamedTuple):
    """Per queue with due work: allowance now, weight, tokens (rate limited: refilled to
    now), policy, and the bucket as stored (what spending compares against)."""

    allow: dict[str, int]
    weights: dict[str, int]
    tokens: dict[str, float | None]
    policies: dict[str, QueuePolicy]
    buckets: dict[str, Bucket]


def _allowances(conn: sqlite3.Connection, queues: set[str], now: datetime) -> Allowances:
    configured = _queue_rows(conn)
    running = {r["queue"]: r["n"] for r in conn.execute(q("running_by_queue"))}
    out = Allowances({}, {}, {}, {}, {})
    for name in queues:
        policy, bucket = configured.get(name, (QueuePolicy(name), Bucket(0, now)))
        tokens = bucket.refill(policy.rate, policy.burst, now) if policy.rate else None
        out.tokens[name] = tokens
        out.allow[name] = allowance(policy, running.get(name, 0), tokens)
        out.weights[name] = policy.weight
        out.policies[name] = policy
        out.buckets[name] = bucket
    return out


def owner_room(
    conn: sqlite3.Connection, quota: Callable[[int], Limits] | None, owners: set[int]
) -> dict[int, int]:
    """How many more jobs each owner with a ``running`` quota may start (others: absent)."""
    if quota is None:
        return {}
    limits = {uid: quota(uid).running for uid in owners}
    if all(v is None for v in limits.values()):
        return {}
    running = {r["owner_uid"]: r["n"] for r in conn.execute(q("running_by_owner"))}
    return {
        uid: max(0, limit - running.get(uid, 0))
        for uid, limit in limits.items()
        if limit is not None
    }


def over_queued_quota(
    conn: sqlite3.Connection,
    quota: Callable[[int], Limits] | None,
    groups: Sequence[Sequence[JobSpec]],
) -> dict[int, JobctlError]:
    """Insert groups (by index) that would take their owner past the ``queued`` quota.

    Counted from ``job_counts`` inside the inserting transaction, once per owner of the
    batch; groups are admitted in order, so of one owner's groups the first ones fit.
    """
    if quota is None:
        return {}
    wanted: dict[int, int | None] = {}
    for group in groups:
        for spec in group:
            if spec.owner_uid not in wanted:
                wanted[spec.owner_uid] = quota(spec.owner_uid).queued
    limited = {uid: n for uid, n in wanted.items() if n is not None}
    if not limited:
        return {}
    have = {uid: _queued(conn, uid) for uid in limited}
    return refuse_over(groups, limited, have)


def _queued(conn: sqlite3.Connection, uid: int) -> int:
    counts = {r["bucket"]: r["n"] for r in conn.execute(q("owner_counts"), {"uid": uid})}
    return int(counts.get("scheduled", 0) + counts.get("due", 0))


def claimable(
    conn: sqlite3.Connection, now: datetime, quota: Callable[[int], Limits] | None = None
) -> tuple[bool, datetime | None]:
    """Whether some due job may start now, else when a rate-limited queue next may.

    Lanes of owners at their ``running`` quota do not count: they wait for a finish,
    which wakes the timer."""
    workers = _worker_queues(conn)
    lanes = [
        (r["queue"], r["owner_uid"])
        for r in conn.execute(q("due_lanes"))
        if r["queue"] not in workers  # the workers' lanes wait for a lease, not the timer
    ]
    room = owner_room(conn, quota, {o for _, o in lanes})
    queues = {queue for queue, o in lanes if room.get(o, 1) > 0}
    if not queues:
        return False, None
    allow, _, tokens, policies, _ = _allowances(conn, queues, now)
    if any(n > 0 for n in allow.values()):
        return True, None
    waits = [
        next_token_at(policies[name], have, now)
        for name, have in tokens.items()
        if have is not None and not policies[name].paused
    ]
    known = [t for t in waits if t is not None]
    return False, min(known) if known else None


Lanes = dict[tuple[str, int], int]


def _worker_queues(conn: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    return worker_queues(SqliteSchedConn(conn, _no_insert))


def _no_insert(conn: sqlite3.Connection, specs: Sequence[JobSpec]) -> list[Any]:
    raise AssertionError("a claim inserts no job")


def _executor_lanes(conn: sqlite3.Connection, lanes: Lanes) -> Lanes:
    return executor_lanes(lanes, _worker_queues(conn))


def _claim_tx(
    db: SqliteDb,
    conn: sqlite3.Connection,
    owner: str,
    limit: int,
    lease_ttl: float,
    keep: Callable[[sqlite3.Connection, Lanes], Lanes] = _executor_lanes,
) -> ClaimRows:
    """Lease the planned jobs of each lane ``keep`` leaves (the executor's: all but the
    worker queues'); returns the claimed rows (``RETURNING *``) and the resource limits
    of their queues, read in this transaction."""
    now = db.clock.now()
    now_ms = rows.to_ms(now)
    conn.execute(q("promote_due"), {"now": now_ms, "limit": PROMOTE_BATCH})
    if limit <= 0:
        return [], {}
    lanes = {(r["queue"], r["owner_uid"]): r["n"] for r in conn.execute(q("due_lanes"))}
    if lanes:
        lanes = keep(conn, lanes)
    if not lanes:
        return [], {}
    allowed = _allowances(conn, {queue for queue, _ in lanes}, now)
    allow, weights = allowed.allow, allowed.weights
    room = owner_room(conn, db.quota, {o for _, o in lanes})
    plan = plan_claims(limit, lanes, allow, weights, db.fairness, room)
    lease_until = now_ms + int(lease_ttl * 1000)
    # claim_lane moves scheduled -> running: the lifecycle table must allow it
    check_transition(0, JobStatus.SCHEDULED, JobStatus.RUNNING, Op.CLAIM)
    raw: list[sqlite3.Row] = []
    for (queue, owner_uid), n in plan.items():
        raw += conn.execute(
            q("claim_lane"),
            {
                "owner": owner,
                "lease_until": lease_until,
                "limit": n,
                "queue": queue,
                "owner_uid": owner_uid,
            },
        ).fetchall()
    found = row_dicts(raw)  # read by name below and when decoded: the names once
    _spend_tokens(conn, found, allowed, now_ms)
    if found:
        items = json.dumps([[r["id"], r["attempt"], r["generation"]] for r in found])
        conn.execute(q("insert_attempts"), {"items": items, "owner": owner, "now": now_ms})
    return found, queue_limits(allowed.policies.values())


def _spend_tokens(
    conn: sqlite3.Connection, found: Sequence[RowLike], allowed: Allowances, now_ms: int
) -> None:
    """Take the claimed jobs' tokens from their queues' buckets: a compare-and-set on the
    bucket as this claim read it, which must hit its row (a bucket changed in between
    would have granted tokens twice: the claim fails whole, nothing of it is kept)."""
    used: dict[str, int] = {}
    for r in found:
        used[r["queue"]] = used.get(r["queue"], 0) + 1
    for name, n in used.items():
        have = allowed.tokens.get(name)
        if have is None:
            continue
        read = allowed.buckets[name]
        params = {
            "name": name,
            "tokens": have - n,
            "now": now_ms,
            "read_tokens": read.tokens,
            "read_at": rows.to_ms(read.at),
        }
        if conn.execute(q("spend_tokens"), params).rowcount != 1:
            raise Conflict(f"queue {name!r}: its tokens changed during a claim; try again")


#: The timer looks at a rate-limited queue again at least this often: a tiny rate (stored
#: before its limit existed) must not put the next token past the end of the calendar.
MAX_TOKEN_WAIT = 86400.0


def next_token_at(policy: QueuePolicy, tokens: float, now: datetime) -> datetime | None:
    """When a rate-limited queue has a whole token again (at most a day away)."""
    if policy.rate is None or tokens >= 1:
        return None
    wait = (1 - tokens) / policy.rate
    return now + timedelta(seconds=min(wait, MAX_TOKEN_WAIT))


__all__ = [
    "PROMOTE_BATCH",
    "QueueOps",
    "next_token_at",
    "policy_of",
    "queue_limits",
    "queue_params",
]
