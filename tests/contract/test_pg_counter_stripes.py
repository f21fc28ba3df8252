"""PostgreSQL only: the job counters never make two writers wait for each other.

Before migration 0009 the counters' trigger upserted one ``job_counts`` row per lane and
bucket. A group commit runs several writes in one transaction, so two daemons could take
two lanes' counter rows in opposite orders across statements: transaction A claims from
lane ``qa`` then ``qb``, B from ``qb`` then ``qa``, and PostgreSQL breaks the cycle after
``deadlock_timeout`` (1 s) with ``deadlock detected``; with 4 daemons that cost half the
cluster's dispatch in half the runs. Here the exact interleaving is run by hand with the
store's own claim (``PgQueues._claim_tx``, one lane at a time): A's second claim starts
while B holds ``qb``, then B's second claim; both must commit, neither waiting.

The counters are striped per server process and folded into stripe 0; the counts must
stay exact (against a GROUP BY over ``jobs``) through concurrent writers and folds, and a
fold must never wait for a writer.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from jobctl.domain.models import AttemptResult, JobSpec
from jobctl.domain.states import Outcome
from tests.contract.conftest import pg_store_schema, second_conn

pytestmark = pytest.mark.postgres
T0 = datetime(2030, 1, 1, tzinfo=UTC)
UID = 1000
#: Guards against a hang on code that waits: far above what a write without waits takes.
LOCK_TIMEOUT_MS = 5000
OK = AttemptResult(Outcome.SUCCEEDED, 0)


@pytest.fixture
def env() -> Iterator[tuple[Any, str]]:
    yield from pg_store_schema(T0)


def _conn(schema: str) -> psycopg.Connection[dict[str, Any]]:
    """A connection of its own (a second daemon's), in the store's schema."""
    conn: psycopg.Connection[dict[str, Any]] = second_conn(schema, LOCK_TIMEOUT_MS)
    return conn


def _add(store: Any, queue: str, n: int, at: datetime = T0, uid: int = UID) -> None:
    store.insert([JobSpec(command=("true",), run_at=at, owner_uid=uid, queue=queue)] * n)


def _claim_lane(store: Any, conn: Any, queue: str, owner: str) -> int:
    """The store's claim of one job, from ``queue``'s lanes only; how many it took."""

    def only(_conn: Any, lanes: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        return {lane: n for lane, n in lanes.items() if lane[0] == queue}

    found, _ = store._queues._claim_tx(conn, owner, 1, 30.0, only)
    return len(found)


Counts = dict[tuple[str, int, str], int]


def _exact(store: Any) -> tuple[Counts, Counts]:
    """The counters (summed over stripes) and the same counts made from ``jobs``."""

    def read(conn: Any) -> tuple[Counts, Counts]:
        kept = conn.execute(
            "SELECT queue, owner_uid, bucket, sum(n)::bigint AS n FROM job_counts"
            " GROUP BY 1, 2, 3 HAVING sum(n) <> 0"
        ).fetchall()
        made = conn.execute(
            "SELECT queue, owner_uid, CASE WHEN due = 1 THEN 'due' ELSE status END AS bucket,"
            " count(*) AS n FROM jobs GROUP BY 1, 2, 3"
        ).fetchall()
        return _keyed(kept), _keyed(made)

    result: tuple[Counts, Counts] = store.db.read(read)
    return result


def _keyed(rows: list[dict[str, Any]]) -> Counts:
    return {(r["queue"], r["owner_uid"], r["bucket"]): r["n"] for r in rows}


def test_claims_of_two_lanes_in_opposite_orders_neither_wait_nor_deadlock(
    env: tuple[Any, str],
) -> None:
    store, schema = env
    _add(store, "qa", 2)
    _add(store, "qb", 2)
    store.promote_due(100)
    a, b = _conn(schema), _conn(schema)
    try:
        assert _claim_lane(store, a, "qa", "daemon-a") == 1  # A holds qa's counters (old)
        assert _claim_lane(store, b, "qb", "daemon-b") == 1  # B holds qb's counters (old)
        with ThreadPoolExecutor(1) as pool:
            # Old schema: A waits for B's qb rows, B then waits for A's qa rows: deadlock
            # detected after deadlock_timeout. Striped: neither waits.
            second_a: Future[int] = pool.submit(_claim_lane, store, a, "qb", "daemon-a")
            assert _claim_lane(store, b, "qa", "daemon-b") == 1
            assert second_a.result(timeout=LOCK_TIMEOUT_MS / 1000 + 5) == 1
        a.commit()
        b.commit()
    finally:
        a.close()
        b.close()
    kept, made = _exact(store)
    assert kept == made == {("qa", UID, "running"): 2, ("qb", UID, "running"): 2}


def test_log_sizes_of_two_owners_in_opposite_orders_neither_wait_nor_deadlock(
    env: tuple[Any, str],
) -> None:
    """``log_usage`` (log bytes per owner, kept by row triggers) had the same cycle: two
    daemons setting their attempts' log sizes for two owners in opposite orders."""
    store, schema = env
    for uid in (1001, 1002):
        _add(store, "qa", 2, uid=uid)
    store.promote_due(100)
    claims = store.claim_due("daemon", 10, 30.0)
    by_owner: dict[int, list[Any]] = {}
    for c in claims:
        by_owner.setdefault(c.job.spec.owner_uid, []).append(c)
    assert sorted(len(v) for v in by_owner.values()) == [2, 2]
    size = store.db.q("set_log_bytes")

    def set_size(conn: Any, claim: Any, n: int) -> None:
        params = {"job_ids": [claim.job.id], "generations": [claim.generation], "sizes": [n]}
        assert conn.execute(size, params).rowcount == 1

    a, b = _conn(schema), _conn(schema)
    try:
        set_size(a, by_owner[1001][0], 100)  # A holds 1001's row (old)
        set_size(b, by_owner[1002][0], 10)  # B holds 1002's row (old)
        with ThreadPoolExecutor(1) as pool:
            later: Future[None] = pool.submit(set_size, a, by_owner[1002][1], 20)
            set_size(b, by_owner[1001][1], 200)
            later.result(timeout=LOCK_TIMEOUT_MS / 1000 + 5)
        a.commit()
        b.commit()
    finally:
        a.close()
        b.close()
    assert (store.log_bytes(1001), store.log_bytes(1002), store.log_bytes()) == (300, 30, 330)
    store.fold_counts()
    rows = store.db.read(lambda c: c.execute("SELECT stripe FROM log_usage").fetchall())
    assert {r["stripe"] for r in rows} == {0}
    assert (store.log_bytes(1001), store.log_bytes(1002), store.log_bytes()) == (300, 30, 330)


def test_a_fold_never_waits_for_a_writer_and_keeps_its_rows_for_later(
    env: tuple[Any, str],
) -> None:
    store, schema = env
    _add(store, "qa", 3)
    store.promote_due(100)
    a = _conn(schema)
    try:
        assert _claim_lane(store, a, "qa", "daemon-a") == 1  # its stripe's rows, held
        mine = a.execute("SELECT pg_backend_pid() AS pid").fetchone()
        assert mine is not None
        moved = store.fold_counts()  # must not wait for A (lock_timeout guards a hang)
        assert moved is not None and moved > 0  # the insert's and promote's stripes
        rows = store.db.read(
            lambda c: c.execute("SELECT DISTINCT stripe FROM job_counts").fetchall()
        )
        assert {r["stripe"] for r in rows} == {0}  # A's rows are not committed, unseen
        a.commit()
    finally:
        a.close()
    rows = store.db.read(lambda c: c.execute("SELECT DISTINCT stripe FROM job_counts").fetchall())
    assert {r["stripe"] for r in rows} == {0, mine["pid"]}
    store.fold_counts()
    rows = store.db.read(lambda c: c.execute("SELECT DISTINCT stripe FROM job_counts").fetchall())
    assert {r["stripe"] for r in rows} == {0}
    kept, made = _exact(store)
    assert kept == made == {("qa", UID, "due"): 2, ("qa", UID, "running"): 1}


def test_a_fold_skips_rows_a_writer_holds(env: tuple[Any, str]) -> None:
    """A committed stripe row that a writer then locks again is left where it is."""
    store, schema = env
    _add(store, "qa", 3)
    store.promote_due(100)
    a = _conn(schema)
    try:
        assert _claim_lane(store, a, "qa", "daemon-a") == 1
        a.commit()
        assert _claim_lane(store, a, "qa", "daemon-a") == 1  # locks its committed rows
        pid = a.execute("SELECT pg_backend_pid() AS pid").fetchone()
        assert pid is not None
        store.fold_counts()
        held = store.db.read(
            lambda c: c.execute(
                "SELECT count(*) AS n FROM job_counts WHERE stripe = %s", (pid["pid"],)
            ).fetchone()
        )
        assert held["n"] > 0  # skipped, not waited for
        a.commit()
    finally:
        a.close()
    kept, made = _exact(store)
    assert kept == made == {("qa", UID, "due"): 1, ("qa", UID, "running"): 2}


def test_counts_stay_exact_through_concurrent_writers_and_folds(env: tuple[Any, str]) -> None:
    """Inserts, claims and finishes on several connections at once, folds between them:
    the counters equal a GROUP BY over ``jobs`` afterwards, and ``stats`` agrees."""
    store, _ = env
    queues = [f"q{i}" for i in range(4)]
    stop = threading.Event()
    folds: list[int | None] = []

    def folder() -> None:
        while not stop.is_set():
            folds.append(store.fold_counts())

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(25):
            _add(store, rng.choice(queues), rng.randint(1, 5), uid=1000 + rng.randint(0, 2))
            store.promote_due(100)
            for claim in store.claim_due(f"daemon-{seed}", rng.randint(0, 4), 30.0):
                store.finish(claim.job.id, claim.generation, OK)

    with ThreadPoolExecutor(5) as pool:
        fold_done = pool.submit(folder)
        for fut in [pool.submit(worker, seed) for seed in range(4)]:
            fut.result(timeout=120)
        stop.set()
        fold_done.result(timeout=30)
    assert any(f for f in folds)  # some folds moved rows while the writers ran
    kept, made = _exact(store)
    assert kept == made
    store.fold_counts()
    assert _exact(store) == (made, made)
    by_queue: dict[str, dict[str, int]] = {}
    for (queue, _uid, bucket), n in made.items():
        by_queue.setdefault(queue, {}).setdefault(bucket, 0)
        by_queue[queue][bucket] += n
    for stats in store.stats():
        want = by_queue[stats.queue]
        waiting = want.get("scheduled", 0) + want.get("due", 0)
        got = (stats.scheduled, stats.running, stats.succeeded)
        assert got == (waiting, want.get("running", 0), want.get("succeeded", 0))


def test_the_daemons_fold_service_folds_on_its_first_pass(env: tuple[Any, str]) -> None:
    """``CountFolds`` (what each daemon on PostgreSQL runs, jobctl/cluster.py) folds the
    store's stripes at once, then plans its next pass ``every`` seconds later."""
    import asyncio

    from jobctl.engine.beat import CountFolds
    from jobctl.store.aio import AsyncStore

    store, _ = env
    _add(store, "qa", 2)
    store.promote_due(100)

    def stripes() -> set[int]:
        rows = store.db.read(lambda c: c.execute("SELECT stripe FROM job_counts").fetchall())
        return {r["stripe"] for r in rows}

    assert stripes() - {0}  # the insert's and the promote's server processes
    astore = AsyncStore(store, threads=1)
    try:
        folds = CountFolds(astore, store.db.clock, store.fold_counts, 10.0)
        planned = asyncio.run(folds.run_once())
    finally:
        astore.close()
    assert planned == store.db.clock.now() + timedelta(seconds=10)
    assert stripes() == {0}
    kept, made = _exact(store)
    assert kept == made == {("qa", UID, "due"): 2}


def test_a_stores_group_commits_write_one_stripe_per_committer(env: tuple[Any, str]) -> None:
    """Each committer thread writes through a connection of its own: however many
    writes, and however busy the main pool is with reads meanwhile, a store's counter
    rows land on at most ``committers`` (2) stripes between folds. Through the main pool,
    which lends its connections in turn, they landed on every one of them (about 10 per
    daemon at size 8: a claim's reads summed 40 stripes per lane with 4 daemons)."""
    store, _ = env

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(15):
            _add(store, f"q{rng.randint(0, 3)}", rng.randint(1, 3))
            store.promote_due(100)
            for claim in store.claim_due(f"daemon-{seed}", 2, 30.0):
                store.finish(claim.job.id, claim.generation, OK)
            store.stats()  # reads on the main pool at the same time: it grows to its size

    with ThreadPoolExecutor(6) as pool:
        for fut in [pool.submit(worker, seed) for seed in range(6)]:
            fut.result(timeout=120)
    rows = store.db.read(
        lambda c: c.execute(
            "SELECT count(DISTINCT stripe) AS n FROM job_counts WHERE stripe <> 0"
        ).fetchall()
    )
    assert 1 <= rows[0]["n"] <= 2
    kept, made = _exact(store)
    assert kept == made
