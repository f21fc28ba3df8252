"""PostgreSQL only: two transactions that take the same rows in opposite orders never
deadlock (issue 15, after migration 0009 did it for ``job_counts``).

A group commit runs several writes in one transaction, so a write's own ordered locking
is not enough: daemon A's transaction may lock X then Y, daemon B's Y then X, across
statements. PostgreSQL breaks such a cycle only after ``deadlock_timeout`` (1 s), rolls
one back with ``deadlock detected``, and the write runs again. Each test runs that exact
interleaving by hand, A's second statement in a thread (it may wait) and B's on the main
thread: both must commit.

- ``schedule_counts`` (per-owner schedule totals) was kept by row triggers that updated
  the owner's one row: A pauses a schedule of owner 1 then one of owner 2, B the reverse.
  Striped per server process by migration 0010, as ``job_counts``.
- The rows of limited queues a claim locks: two claims in one transaction, A's from
  ``qa`` then ``qb``, B's from ``qb`` then ``qa``. A claim now waits only for queues
  named after every queue its transaction holds, and skips (this time) one named before
  that another transaction holds: no wait ever points backwards, so none closes a cycle.
- Every queue lock, one order (branch pglock, jobctl.store.pg.lockorder): ``set_queue``
  of ``qb`` then ``qa`` beside a claim of ``qa`` then ``qb`` (raw transactions, and a
  real group commit whose ``qa`` write is bounced and run alone), payload inserts for two
  worker queues in opposite orders (advisory locks): on main each of them deadlocked. The
  one-round-trip enqueue's locks, without the rule, are alone in their transaction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from jobctl.domain.dispatch import QueuePolicy
from jobctl.domain.models import JobSpec, JobTemplate
from jobctl.domain.schedule import Misfire, Overlap, Policy, ScheduleSpec, Timing
from jobctl.domain.workers import payload_text
from tests.contract.conftest import pg_store_schema, second_conn

pytestmark = pytest.mark.postgres
T0 = datetime(2030, 1, 1, tzinfo=UTC)
#: Guards against a hang on code that waits: far above what a write without waits takes.
LOCK_TIMEOUT_MS = 5000
#: Generous for a wait that ends when the other transaction commits, on a loaded host.
WAIT_S = LOCK_TIMEOUT_MS / 1000 + 5


@pytest.fixture
def env() -> Iterator[tuple[Any, str]]:
    yield from pg_store_schema(T0)


def _conn(schema: str) -> psycopg.Connection[dict[str, Any]]:
    """A connection of its own (a second daemon's), in the store's schema."""
    conn: psycopg.Connection[dict[str, Any]] = second_conn(schema, LOCK_TIMEOUT_MS)
    return conn


def _schedule(store: Any, uid: int) -> str:
    timing = Timing("UTC", every=60, anchor=T0)
    policy = Policy(Misfire.SKIP, 1, Overlap.ALLOW)
    spec = ScheduleSpec(timing, policy, JobTemplate(("true",), max_attempts=1), uid)
    sid: str = store.create_schedule(spec).id
    return sid


def test_schedule_changes_of_two_owners_in_opposite_orders_do_not_deadlock(
    env: tuple[Any, str],
) -> None:
    store, schema = env
    a1, a2, b1, b2 = (_schedule(store, uid) for uid in (1001, 1002, 1001, 1002))
    pause = store.db.q("pause_schedule")

    def paused(conn: Any, sid: str) -> int:
        return int(conn.execute(pause, {"id": sid}).rowcount)

    a, b = _conn(schema), _conn(schema)
    try:
        assert paused(a, a1) == 1  # A holds owner 1001's counters (before 0010)
        assert paused(b, b2) == 1  # B holds owner 1002's
        with ThreadPoolExecutor(1) as pool:
            second_a: Future[int] = pool.submit(paused, a, a2)  # waited for B's 1002
            assert paused(b, b1) == 1  # waited for A's 1001: deadlock detected
            assert second_a.result(timeout=WAIT_S) == 1
        a.commit()
        b.commit()
    finally:
        a.close()
        b.close()
    totals = store.schedule_totals()
    assert (totals["total"], totals["paused"]) == (4, 4)
    # each owner has rows in several stripes (the creations', A's and B's): summed
    assert [store.owner_usage(uid)["schedules"] for uid in (1001, 1002)] == [2, 2]
    assert store.fold_counts() is not None
    rows = store.db.read(lambda c: c.execute("SELECT stripe FROM schedule_counts").fetchall())
    assert {r["stripe"] for r in rows} == {0}  # folded, and the totals unchanged
    assert store.schedule_totals() == totals
    assert [store.owner_usage(uid)["schedules"] for uid in (1001, 1002)] == [2, 2]


def _claim_lane(store: Any, conn: Any, queue: str, owner: str) -> int:
    """The store's claim of one job, from ``queue``'s lanes only; how many it took."""

    def only(_conn: Any, lanes: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        return {lane: n for lane, n in lanes.items() if lane[0] == queue}

    found, _ = store._queues._claim_tx(conn, owner, 1, 30.0, only)
    return len(found)


def test_two_claims_per_transaction_on_limited_queues_in_opposite_orders_do_not_deadlock(
    env: tuple[Any, str],
) -> None:
    store, schema = env
    for name in ("qa", "qb"):
        store.set_queue(QueuePolicy(name, concurrency=10))
        store.insert([JobSpec(("true",), T0 - timedelta(seconds=1), 1000, queue=name)] * 3)
    store.promote_due(100)
    a, b = _conn(schema), _conn(schema)
    try:
        assert _claim_lane(store, a, "qa", "daemon-a") == 1  # A holds qa's row
        assert _claim_lane(store, b, "qb", "daemon-b") == 1  # B holds qb's row
        with ThreadPoolExecutor(1) as pool:
            second_a: Future[int] = pool.submit(_claim_lane, store, a, "qb", "daemon-a")
            # B holds qb and qa is named before it: B skips qa (A holds it) instead of
            # waiting, which would close the cycle; A waits for qb until B commits.
            assert _claim_lane(store, b, "qa", "daemon-b") == 0
            b.commit()
            assert second_a.result(timeout=WAIT_S) == 1
        a.commit()
        assert _claim_lane(store, b, "qa", "daemon-b") == 1  # next time, qa is free
        b.commit()
    finally:
        a.close()
        b.close()
    running = {s.queue: s.running for s in store.stats()}
    assert running == {"qa": 2, "qb": 2}


def _waits_for_a_lock(store: Any, pid: int) -> None:
    """Return once server process ``pid`` waits for a heavyweight lock (polled)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        row = store.db.read(
            lambda c: c.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
        )
        if row is not None and row["wait_event_type"] == "Lock":
            return
        time.sleep(0.01)
    raise AssertionError(f"server process {pid} never waited for a lock")


def test_a_claim_still_waits_for_a_limited_queue_named_after_those_it_holds(
    env: tuple[Any, str],
) -> None:
    """The limits still hold across daemons: a claim never takes from a limited queue
    without its row; it skips only a queue named before one its transaction holds."""
    store, schema = env
    store.set_queue(QueuePolicy("qa", concurrency=1))
    store.insert([JobSpec(("true",), T0 - timedelta(seconds=1), 1000, queue="qa")] * 2)
    store.promote_due(100)
    a, b = _conn(schema), _conn(schema)
    try:
        assert _claim_lane(store, a, "qa", "daemon-a") == 1
        with ThreadPoolExecutor(1) as pool:
            later: Future[int] = pool.submit(_claim_lane, store, b, "qa", "daemon-b")
            _waits_for_a_lock(store, b.info.backend_pid)  # not skipped: B waits for A
            assert not later.done()
            a.commit()
            assert later.result(timeout=WAIT_S) == 0  # then saw qa full
        b.commit()
    finally:
        a.close()
        b.close()
    assert {s.queue: s.running for s in store.stats()} == {"qa": 1}


def _set(store: Any, conn: Any, name: str) -> QueuePolicy:
    """The store's ``set_queue`` write (concurrency 10) in ``conn``'s transaction."""
    policy: QueuePolicy = store._queues.set_queue_tx(conn, QueuePolicy(name, concurrency=10))
    return policy


def _limited_with_due_jobs(store: Any, *names: str) -> None:
    for name in names:
        store.set_queue(QueuePolicy(name, concurrency=10))
        store.insert([JobSpec(("true",), T0 - timedelta(seconds=1), 1000, queue=name)] * 3)
    store.promote_due(100)


def test_set_queue_named_before_a_queue_its_transaction_holds_never_waits_for_a_claim(
    env: tuple[Any, str],
) -> None:
    """A group commit's set_queue of qb then qa; a claim of qa then qb. Before the lock
    order covered set_queue, A waited for B's qa while B waited for A's qb."""
    from jobctl.store.pg.lockorder import OutOfOrder

    store, schema = env
    _limited_with_due_jobs(store, "qa", "qb")
    a, b = _conn(schema), _conn(schema)
    try:
        assert _set(store, a, "qb").concurrency == 10  # A holds qb's row
        assert _claim_lane(store, b, "qa", "daemon-b") == 1  # B holds qa's row
        with ThreadPoolExecutor(1) as pool:
            b_qb: Future[int] = pool.submit(_claim_lane, store, b, "qb", "daemon-b")
            _waits_for_a_lock(store, b.info.backend_pid)  # in order: B waits for A's qb
            with pytest.raises(OutOfOrder), a.transaction():  # a savepoint, as a batch's
                _set(store, a, "qa")  # before qb, held by B: tried, not waited for
            a.commit()
            assert b_qb.result(timeout=WAIT_S) == 1
        b.commit()
        assert _set(store, a, "qa").concurrency == 10  # alone: in order, nothing held
        a.commit()
    finally:
        a.close()
        b.close()
    assert {s.queue: s.running for s in store.stats()} == {"qa": 1, "qb": 1}


def test_a_group_commit_of_set_queue_writes_in_reverse_order_runs_beside_a_claim(
    env: tuple[Any, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 15: set_queue(qb) and set_queue(qa) in one group commit, while another
    daemon's claim holds qa and waits for qb. The qa write gives its savepoint up, the
    batch commits (qb free for the claim) and the group commit runs qa's write again
    alone, which waits for the claim's commit. No deadlock, so no retry is logged."""
    store, schema = env
    _limited_with_due_jobs(store, "qa", "qb")
    reached, go = threading.Event(), threading.Event()

    def gate(_conn: Any) -> None:  # between the two writes of the batch
        reached.set()
        assert go.wait(WAIT_S)

    def setter(name: str) -> Any:
        return lambda conn: store._queues.set_queue_tx(conn, QueuePolicy(name, rate=5.0))

    batch: list[tuple[Any, Future[Any]]] = [
        (setter("qb"), Future()),
        (gate, Future()),
        (setter("qa"), Future()),
    ]
    b = _conn(schema)
    caplog.set_level(logging.WARNING, logger="jobctl.store")
    try:
        assert _claim_lane(store, b, "qa", "daemon-b") == 1  # B holds qa's row
        with ThreadPoolExecutor(2) as pool:
            committed = pool.submit(store.db.commits._commit, batch, store.db.pool)
            assert reached.wait(WAIT_S)  # the batch holds qb's row
            b_qb: Future[int] = pool.submit(_claim_lane, store, b, "qb", "daemon-b")
            _waits_for_a_lock(store, b.info.backend_pid)
            go.set()  # the batch's next write: qa, held by B
            assert b_qb.result(timeout=WAIT_S) == 1  # the batch committed without it
            b.commit()
            committed.result(timeout=WAIT_S)
    finally:
        b.close()
    assert [fut.result(timeout=0).rate for _, fut in batch[::2]] == [5.0, 5.0]
    assert {p.name: p.rate for p, _ in store.queues()} == {"qa": 5.0, "qb": 5.0}
    assert "event=pg_retry" not in caplog.text


def _in_lock_order(store: Any, *names: str) -> list[str]:
    """``names`` in the order of their advisory locks (by key: the hash of schema and
    name, the lock's identity)."""
    q = "SELECT hashtext(current_schema() || '.' || %s) AS k"
    keys = {n: store.db.read(lambda c, n=n: c.execute(q, (n,)).fetchone()["k"]) for n in names}
    return sorted(names, key=keys.__getitem__)


def test_payload_inserts_of_two_worker_queues_in_opposite_orders_do_not_deadlock(
    env: tuple[Any, str],
) -> None:
    """The advisory locks of two group commits: A inserts payload jobs for ``hi`` then
    ``lo``, B for ``lo`` then ``hi`` (each queue's lock exclusive). A's second insert is
    before the lock it holds and B holds it: tried, not waited for."""
    from jobctl.store.pg.inserts import insert_groups_tx
    from jobctl.store.pg.lockorder import OutOfOrder

    store, schema = env
    lo, hi = _in_lock_order(store, "qa", "qb")
    for name in (lo, hi):
        store.set_worker_queue(name, None)

    def insert(conn: Any, queue: str) -> None:
        payload = payload_text({"n": 1})
        spec = JobSpec(command=(), payload=payload, run_at=T0, owner_uid=1000, queue=queue)
        (out,) = insert_groups_tx(store.db, conn, [[spec]])
        assert isinstance(out, list)

    a, b = _conn(schema), _conn(schema)
    try:
        insert(a, hi)
        insert(b, lo)
        with ThreadPoolExecutor(1) as pool:
            b_hi = pool.submit(insert, b, hi)
            _waits_for_a_lock(store, b.info.backend_pid)  # in order: B waits for A
            with pytest.raises(OutOfOrder), a.transaction():
                insert(a, lo)
            a.commit()
            b_hi.result(timeout=WAIT_S)
        b.commit()
        insert(a, lo)
        a.commit()
    finally:
        a.close()
        b.close()
    assert {s.queue: s.scheduled for s in store.stats()} == {"qa": 2, "qb": 2}


def test_a_pipelined_commit_carries_one_write_that_locks_queues_at_most(
    env: tuple[Any, str],
) -> None:
    """``lock_queues_shared`` (the one-round-trip enqueue's locks) has no ordering rule
    of its own, for its cost: it must be the only statement of queue locks in its
    transaction. Two such writes in one batch go the checked way, unstaged."""
    from jobctl.store.pg.insertbatch import _InsertWrite
    from jobctl.store.pg.pipelined import NOTHING

    store, _ = env

    def write(queue: str) -> Any:
        spec = JobSpec(("true",), T0, 1000, queue=queue)
        return _InsertWrite(store.db, lambda: [([[spec]], Future())])

    two: list[tuple[Any, Future[Any]]] = [(write("qb"), Future()), (write("qa"), Future())]
    assert store.db.commits._pipelined(two, store.db.pool) is False
    assert not any(w.taken for w, _ in two)  # not staged: the checked way takes them
    one: list[tuple[Any, Future[Any]]] = [(write("qa"), Future()), (NOTHING, Future())]
    assert store.db.commits._pipelined(one, store.db.pool) is True
    assert len(one[0][1].result(timeout=0)) == 1
    assert {s.queue: s.scheduled for s in store.stats()} == {"qa": 1}
