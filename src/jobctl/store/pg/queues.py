"""Claims, queues, the DLQ, retention and the audit trail on PostgreSQL.

A claim, in one transaction: promote due jobs (``SKIP LOCKED``), lock the rows of the
limited queues it may take from (in name order), read the lanes and the running counts
(fresh: each statement of a READ COMMITTED transaction sees what committed before it),
plan with :func:`jobctl.domain.dispatch.plan_claims`, and take every lane's jobs with one
statement (``claim_lanes``: ``FOR UPDATE SKIP LOCKED`` per lane inside a materialized
CTE, the lease and the attempt rows). Holding the queue rows is what makes
``concurrency``, ``rate`` and pause hold across daemons: two claims on one limited queue
take turns; claims on unlimited queues never wait for each other. A group commit may run
several claims, inserts and ``set_queue`` calls in one transaction: a claim waits only for
queue locks keyed after every one its transaction already holds, and skips a queue keyed
before that another transaction holds (``lock_limited_queues``); ``set_queue`` takes the
queue's advisory lock, then its row, by the same rule, and gives its savepoint up when it
would have to wait out of order (:mod:`jobctl.store.pg.lockorder`: every path's locks and
why no two daemons' transactions then wait for each other in a cycle;
tests/contract/test_pg_lock_order.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from jobctl.domain.audit import AuditRecord
from jobctl.domain.dispatch import Bucket, QueuePolicy, allowance, plan_claims
from jobctl.domain.models import Claim, Job
from jobctl.domain.resources import Resources
from jobctl.domain.workers import Lessee, executor_lanes, lease_lanes, worker_owner
from jobctl.errors import Conflict
from jobctl.store.audit import record_from_row
from jobctl.store.claims import claims_from_rows
from jobctl.store.jobrow import job_from_row
from jobctl.store.pg import lockorder
from jobctl.store.pg.db import PgConn, PgDb
from jobctl.store.pg.schedconn import PgSchedConn
from jobctl.store.queues import PROMOTE_BATCH, next_token_at, policy_of, queue_limits, queue_params
from jobctl.store.retention import Pruned
from jobctl.store.rows import RowLike, ms_to_dt, to_ms
from jobctl.store.workerq import worker_queues

Lanes = dict[tuple[str, int], int]


def _limited(policy: QueuePolicy) -> bool:
    return policy.paused or policy.concurrency is not None or policy.rate is not None


class PgQueues:
    def __init__(self, db: PgDb) -> None:
        self.db = db

    def claim_due(self, owner: str, limit: int, lease_ttl: float) -> list[Claim]:
        found, defaults = self.db.write(lambda conn: self._claim_tx(conn, owner, limit, lease_ttl))
        found.sort(key=lambda r: (r["sort_key"], r["id"]))
        return claims_from_rows(found, defaults)

    def lease(
        self, queues: Sequence[str], lessee: Lessee, limit: int, lease_ttl: float
    ) -> list[Claim]:
        """A worker's lease (docs/workers.md), as SQLite's ``QueueOps.lease``."""

        def keep(conn: PgConn, lanes: Lanes) -> Lanes:
            return lease_lanes(lanes, queues, self._workers(conn), lessee)

        owner = worker_owner(lessee.uid)
        found, defaults = self.db.write(
            lambda conn: self._claim_tx(conn, owner, limit, lease_ttl, keep)
        )
        found.sort(key=lambda r: (r["sort_key"], r["id"]))
        return claims_from_rows(found, defaults)

    def _workers(self, conn: PgConn) -> dict[str, tuple[str, ...]]:
        return worker_queues(PgSchedConn(self.db, conn))

    def _claim_tx(
        self,
        conn: PgConn,
        owner: str,
        limit: int,
        lease_ttl: float,
        keep: Callable[[PgConn, Lanes], Lanes] | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Resources]]:
        """Lease the planned jobs of the lanes ``keep`` leaves (None: the executor's,
        every lane but the worker queues'); the claimed rows, and the resource limits of
        their queues (read here)."""
        now = self.db.clock.now()
        now_ms = to_ms(now)
        conn.execute(self.db.q("promote_due"), {"now": now_ms, "limit": PROMOTE_BATCH})
        if limit <= 0:
            return [], {}
        lanes = {(r["queue"], r["owner_uid"]): r["n"] for r in conn.execute(self.db.q("due_lanes"))}
        if lanes:
            lanes = (
                executor_lanes(lanes, self._workers(conn)) if keep is None else keep(conn, lanes)
            )
        if not lanes:
            return [], {}
        configured = {r["name"]: r for r in conn.execute(self.db.q("all_queues"))}
        lanes, held = self._lock_limited(conn, lanes, configured)
        if not lanes:
            return [], {}
        allow, weights, tokens = self._allowances(conn, lanes, configured, held, now)
        room = self._owner_room(conn, {o for _, o in lanes})
        with self.db.fairness_lock:
            plan = plan_claims(limit, lanes, allow, weights, self.db.fairness, room)
        plan = {lane: n for lane, n in plan.items() if n > 0}
        if not plan:
            return [], {}
        params = {
            "queues": [q for q, _ in plan],
            "owners": [o for _, o in plan],
            "limits": list(plan.values()),
            "owner": owner,
            "lease_until": now_ms + int(lease_ttl * 1000),
            "now": now_ms,
        }
        found = conn.execute(self.db.q("claim_lanes"), params).fetchall()
        self._spend(conn, found, tokens, held, now_ms)
        return found, queue_limits(policy_of(r) for r in configured.values())

    def _lock_limited(
        self, conn: PgConn, lanes: Lanes, configured: dict[str, Any]
    ) -> tuple[Lanes, dict[str, Any]]:
        """Lock the rows of the lanes' queues that limit (their counts and tokens are
        read and spent under the lock); the lanes left, and the locked rows by name. A
        limited queue not locked is held by another transaction and named before one this
        transaction holds (lock_limited_queues): skipped this time, never waited for."""
        names = sorted(
            n
            for n in {q for q, _ in lanes}
            if n in configured and _limited(policy_of(configured[n]))
        )
        held = {
            r["name"]: r for r in conn.execute(self.db.q("lock_limited_queues"), {"names": names})
        }
        skipped = set(names) - held.keys()
        return {lane: n for lane, n in lanes.items() if lane[0] not in skipped}, held

    def _allowances(
        self,
        conn: PgConn,
        lanes: Lanes,
        configured: dict[str, Any],
        held: dict[str, Any],
        now: datetime,
    ) -> tuple[dict[str, int], dict[str, int], dict[str, float | None]]:
        """Per queue of the lanes: how many may start now (its concurrency and rate
        limits), its fairness weight, and its tokens as refilled now (None: no rate)."""
        running = {r["queue"]: r["n"] for r in conn.execute(self.db.q("running_by_queue"))}
        allow, weights, tokens = {}, {}, {}
        for name in {q for q, _ in lanes}:
            row = held.get(name, configured.get(name))  # held: read under the lock
            policy = QueuePolicy(name) if row is None else policy_of(row)
            have = None
            if row is not None and policy.rate is not None:
                have = Bucket(row["tokens"], ms_to_dt(row["tokens_at"])).refill(
                    policy.rate, policy.burst, now
                )
            tokens[name] = have
            allow[name] = allowance(policy, running.get(name, 0), have)
            weights[name] = policy.weight
        return allow, weights, tokens

    def _owner_room(self, conn: PgConn, owners: set[int]) -> dict[int, int]:
        quota = self.db.quota
        if quota is None:
            return {}
        limits = {uid: quota(uid).running for uid in owners}
        if all(v is None for v in limits.values()):
            return {}
        running = {r["owner_uid"]: r["n"] for r in conn.execute(self.db.q("running_by_owner"))}
        return {uid: max(0, n - running.get(uid, 0)) for uid, n in limits.items() if n is not None}

    def _spend(
        self,
        conn: PgConn,
        found: Sequence[RowLike],
        tokens: Mapping[str, float | None],
        held: Mapping[str, RowLike],
        now_ms: int,
    ) -> None:
        used: dict[str, int] = {}
        for r in found:
            used[r["queue"]] = used.get(r["queue"], 0) + 1
        for name, n in used.items():
            have = tokens.get(name)
            if have is None:
                continue
            read = held[name]
            params = {
                "name": name,
                "tokens": have - n,
                "now": now_ms,
                "read_tokens": read["tokens"],
                "read_at": read["tokens_at"],
            }
            if conn.execute(self.db.q("spend_tokens"), params).rowcount != 1:
                raise Conflict(f"queue {name!r}: its tokens changed during a claim; try again")

    def promote_due(self, limit: int) -> int:
        params = {"now": self.db.now_ms(), "limit": limit}
        return self.db.write(lambda conn: conn.execute(self.db.q("promote_due"), params).rowcount)

    def queues(self) -> list[tuple[QueuePolicy, float | None]]:
        def read(conn: PgConn) -> list[tuple[QueuePolicy, float | None]]:
            now = self.db.clock.now()
            out = []
            for r in conn.execute(self.db.q("all_queues")):
                policy = policy_of(r)
                tokens = None
                if policy.rate is not None:
                    bucket = Bucket(r["tokens"], ms_to_dt(r["tokens_at"]))
                    tokens = bucket.refill(policy.rate, policy.burst, now)
                out.append((policy, tokens))
            return out

        return self.db.read(read)

    def set_queue(self, policy: QueuePolicy) -> QueuePolicy:
        return self.db.write(lambda conn: self.set_queue_tx(conn, policy))

    def set_queue_tx(self, conn: PgConn, policy: QueuePolicy) -> QueuePolicy:
        """Upsert the queue's policy, its locks taken first by the one lock order
        (:mod:`jobctl.store.pg.lockorder`): the queue's advisory lock exclusive (so no
        other writer inserts its row meanwhile), then its row. Several set_queue calls
        share one group commit: the row of one named before a queue this transaction
        holds is only tried (:class:`~jobctl.store.pg.lockorder.OutOfOrder` if held
        elsewhere), and the group commit runs that write again alone."""
        lockorder.check(lockorder.advisory(self.db, conn, [(policy.name, True)]))
        lockorder.rows(self.db, conn, [policy.name])
        params = queue_params(policy, self.db.now_ms())
        return policy_of(_one(conn.execute(self.db.q("upsert_queue"), params).fetchone()))

    def queue_policy(self, name: str) -> QueuePolicy:
        def read(conn: PgConn) -> QueuePolicy:
            row = conn.execute(self.db.q("queue_by_name"), {"name": name}).fetchone()
            return QueuePolicy(name) if row is None else policy_of(row)

        return self.db.read(read)

    def list_dead(self, params: dict[str, object]) -> list[Job]:
        return self.db.read(
            lambda conn: [job_from_row(r) for r in conn.execute(self.db.q("list_dead"), params)]
        )

    def purge_dead(
        self, older_than: datetime, limit: int, owner: int | None
    ) -> tuple[int, list[str]]:
        params = {"before": to_ms(older_than), "limit": limit, "owner": owner}

        def tx(conn: PgConn) -> tuple[int, list[str]]:
            found = conn.execute(self.db.q("purge_dead"), params).fetchall()
            return len({r["id"] for r in found}), [r["log_path"] for r in found if r["log_path"]]

        return self.db.write(tx)

    # -- retention and the audit trail -----------------------------------------------

    def prunable(self, cutoffs: Mapping[str, datetime]) -> dict[str, int]:
        def read(conn: PgConn) -> dict[str, int]:
            q = self.db.q("count_prunable")
            return {
                status: _one(
                    conn.execute(q, {"status": status, "before": to_ms(before)}).fetchone()
                )["n"]
                for status, before in cutoffs.items()
            }

        return self.db.read(read)

    def prune(self, cutoffs: Mapping[str, datetime], limit: int) -> Pruned:
        def tx(conn: PgConn) -> Pruned:
            deleted: dict[str, int] = {}
            logs: list[str] = []
            left = limit
            for status, before in cutoffs.items():
                if status not in ("succeeded", "cancelled", "dead"):
                    raise ValueError(f"only final jobs are pruned, not {status!r}")
                params = {"status": status, "before": to_ms(before), "limit": left}
                found = conn.execute(self.db.q("prune"), params).fetchall()
                deleted[status] = len({r["id"] for r in found})
                logs += [r["log_path"] for r in found if r["log_path"]]
                left -= deleted[status]
                if left <= 0:
                    break
            return Pruned(deleted, tuple(logs))

        return self.db.write(tx)

    def list_audit(self, params: dict[str, object]) -> list[AuditRecord]:
        return self.db.read(
            lambda conn: [record_from_row(r) for r in conn.execute(self.db.q("list_audit"), params)]
        )

    def prune_audit(self, before: datetime, limit: int) -> int:
        params = {"before": to_ms(before), "limit": limit}
        return self.db.write(lambda conn: conn.execute(self.db.q("prune_audit"), params).rowcount)


def claimable(db: PgDb, conn: PgConn, now: datetime) -> tuple[bool, datetime | None]:
    """Whether some due job may start now, else when a rate-limited queue next may (as
    :func:`jobctl.store.queues.claimable`, without locking anything)."""
    workers = worker_queues(PgSchedConn(db, conn))
    lanes = [
        (r["queue"], r["owner_uid"])
        for r in conn.execute(db.q("due_lanes"))
        if r["queue"] not in workers  # the workers' lanes wait for a lease, not the timer
    ]
    if not lanes:
        return False, None
    queues = {q for q, _ in lanes}
    configured = {r["name"]: r for r in conn.execute(db.q("all_queues"))}
    running = {r["queue"]: r["n"] for r in conn.execute(db.q("running_by_queue"))}
    waits: list[datetime] = []
    for name in queues:
        row = configured.get(name)
        policy = QueuePolicy(name) if row is None else policy_of(row)
        have = None
        if row is not None and policy.rate is not None:
            have = Bucket(row["tokens"], ms_to_dt(row["tokens_at"])).refill(
                policy.rate, policy.burst, now
            )
        if allowance(policy, running.get(name, 0), have) > 0:
            return True, None
        if have is not None and not policy.paused:
            at = next_token_at(policy, have, now)
            if at is not None:
                waits.append(at)
    return False, min(waits) if waits else None


def _one(row: RowLike | None) -> RowLike:
    if row is None:
        raise AssertionError("the statement returned no row")
    return row


__all__ = ["PgQueues", "claimable", "policy_of"]
