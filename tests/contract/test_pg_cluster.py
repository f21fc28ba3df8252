"""PostgreSQL only: several stores (as several daemons would hold) on one database.

The known failures of PostgreSQL job queues, each made to happen: a locking subquery
re-run by a nested loop (claims and deletes must never take more than their limit),
two daemons claiming, finishing and reclaiming the same jobs, a new key raced by two
daemons, and a queue's concurrency limit held across every daemon.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from urllib.parse import quote

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.dispatch import QueuePolicy
from jobctl.domain.models import AttemptResult, JobSpec
from jobctl.domain.states import JobStatus, Outcome
from jobctl.errors import LeaseLost
from jobctl.store.migrate import migrations
from jobctl.store.pg.migrate import PATH
from tests.contract.conftest import PG_DSN, pg_schema

pytestmark = pytest.mark.postgres
T0 = datetime(2030, 1, 1, tzinfo=UTC)

#: The planner pushed to nested loops, as in the reports of queues that claimed more
#: than their LIMIT (see jobctl.store.sql.postgres queries.sql, claim_lanes).
NESTED_LOOPS = "-c enable_hashjoin=off -c enable_mergejoin=off -c enable_material=off"


@pytest.fixture
def schema() -> Iterator[str]:
    yield from pg_schema()


def _open(schema: str, clock: FakeClock, options: str = "") -> Any:
    from jobctl.store.pg.store import PostgresStore

    dsn = PG_DSN + (
        ("&" if "?" in PG_DSN else "?") + "options=" + quote(options) if options else ""
    )
    return PostgresStore(dsn, clock, random.Random(), schema=schema, pool_size=4)


def _specs(n: int, queue: str = "default", at: datetime = T0) -> list[JobSpec]:
    return [JobSpec(("true",), at, 1000, queue=queue) for _ in range(n)]


def _insert_one(stores: tuple[Any, ...], spec: JobSpec, i: int) -> Any:
    return stores[i].insert([spec])[0]


def _together(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run fn(0..n-1) on n threads released at once; their answers in order."""
    start = threading.Barrier(n)
    out: list[Any] = [None] * n

    def run(i: int) -> None:
        start.wait()
        out[i] = fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_claims_and_deletes_never_exceed_their_limit_with_nested_loops_and_stale_stats(
    schema: str,
) -> None:
    clock = FakeClock(T0)
    store = _open(schema, clock, NESTED_LOOPS)
    try:
        store.db.write(lambda c: c.execute("ANALYZE jobs"))  # statistics of an empty table
        store.insert(_specs(200))
        claimed = store.claim_due("w", 7, 30)
        assert len(claimed) == 7
        done = [(c.job.id, c.generation, AttemptResult(Outcome.SUCCEEDED, 0)) for c in claimed]
        store.finish_many(done)
        clock.advance(days=10)
        pruned = store.prune({"succeeded": clock.now()}, limit=3)
        assert pruned.total == 3
    finally:
        store.close()


def test_two_daemons_claim_every_job_exactly_once(schema: str) -> None:
    clock = FakeClock(T0)
    a, b = _open(schema, clock), _open(schema, clock)
    try:
        a.insert(_specs(300))

        def drain(i: int) -> list[int]:
            store, got = (a, b)[i], []
            while batch := store.claim_due(f"daemon-{i}", 16, 30):
                got += [c.job.id for c in batch]
            return got

        first, second = _together(2, drain)
        assert len(first) + len(second) == 300
        assert len(set(first) | set(second)) == 300
    finally:
        a.close()
        b.close()


def test_a_queues_concurrency_holds_across_daemons(schema: str) -> None:
    clock = FakeClock(T0)
    stores = [_open(schema, clock) for _ in range(4)]
    try:
        stores[0].set_queue(QueuePolicy("io", concurrency=2))
        stores[0].insert(_specs(40, queue="io"))
        got = _together(4, lambda i: stores[i].claim_due(f"daemon-{i}", 10, 30))
        assert sum(len(g) for g in got) == 2
        running = stores[1].list_jobs(JobStatus.RUNNING, "io", 100, None)
        assert len(running) == 2
    finally:
        for s in stores:
            s.close()


def test_a_finish_racing_a_reclaim_lets_exactly_one_win(schema: str) -> None:
    clock = FakeClock(T0)
    a, b = _open(schema, clock), _open(schema, clock)
    try:
        a.insert(_specs(20))
        claims = a.claim_due("daemon-a", 20, 30)
        clock.advance(31)  # a's leases have lapsed; b reclaims while a finishes
        done = [(c.job.id, c.generation, AttemptResult(Outcome.SUCCEEDED, 0)) for c in claims]
        finished, reclaimed = _together(
            2, lambda i: a.finish_many(done) if i == 0 else b.reclaim_expired(100, "daemon-b")
        )
        won = {done[i][0] for i, r in enumerate(finished) if not isinstance(r, LeaseLost)}
        lost = {done[i][0] for i, r in enumerate(finished) if isinstance(r, LeaseLost)}
        assert won.isdisjoint({j.id for j in reclaimed})
        assert lost == {j.id for j in reclaimed}
        for c in claims:
            job = a.get(c.job.id)
            assert len(job.attempts) == 1 and job.attempts[0].outcome is not None
    finally:
        a.close()
        b.close()


def test_two_daemons_racing_for_one_new_key_make_one_job(schema: str) -> None:
    clock = FakeClock(T0)
    a, b = _open(schema, clock), _open(schema, clock)
    try:
        for n in range(10):
            spec = JobSpec(("true",), T0, 1000, key=f"k-{n}")
            got = _together(2, partial(_insert_one, (a, b), spec))
            assert got[0].job.id == got[1].job.id
            assert sorted([got[0].created, got[1].created]) == [False, True]
    finally:
        a.close()
        b.close()


def test_migrations_applied_by_racing_daemons_apply_once(schema: str) -> None:
    clock = FakeClock(T0 - timedelta(0))
    stores = _together(3, lambda i: _open(schema, clock))
    try:
        rows = stores[0].db.read(
            lambda c: c.execute("SELECT count(*) AS n FROM schema_migrations").fetchone()
        )
        assert rows["n"] == len(migrations(PATH))  # each once, not once per daemon
    finally:
        for s in stores:
            s.close()


def test_concurrent_inserts_share_writes_and_each_caller_gets_its_own_answer(
    schema: str,
) -> None:
    from jobctl.errors import KeyConflict

    clock = FakeClock(T0)
    store = _open(schema, clock)
    try:
        store.insert([JobSpec(("true",), T0, 1000, key="taken")])

        def insert(i: int) -> Any:
            if i == 3:  # same key, another body: refused alone
                spec = JobSpec(("false",), T0, 1000, key="taken")
            else:
                spec = JobSpec(("echo", str(i)), T0, 1000, key=f"k{i}")
            try:
                return store.insert([spec])[0].job
            except KeyConflict as exc:
                return exc

        got = _together(8, insert)
        assert isinstance(got[3], KeyConflict)
        for i, job in enumerate(got):
            if i != 3:
                assert job.key == f"k{i}" and job.spec.command == ("echo", str(i))
        assert len(store.list_jobs(None, None, 100, None)) == 8
    finally:
        store.close()


def test_a_daemon_clock_30s_off_is_corrected_to_the_servers_and_warned_about(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    from jobctl.domain.clock import SystemClock
    from jobctl.store.pg.clock import ServerClock

    real = SystemClock().now()
    ahead, behind = FakeClock(real + timedelta(seconds=30)), FakeClock(real - timedelta(seconds=30))
    store = _open(schema, FakeClock(T0))
    try:
        with caplog.at_level("INFO", logger="jobctl.store"):
            clocks = [ServerClock(ahead), ServerClock(behind)]
            offsets = [c.remeasure(store.db) for c in clocks]
        assert offsets[0] == pytest.approx(-30, abs=2)
        assert offsets[1] == pytest.approx(30, abs=2)
        # corrected, the two daemons agree with each other (and the server) to a round trip
        assert abs((clocks[0].now() - clocks[1].now()).total_seconds()) < 2
        warnings = [r for r in caplog.records if "event=clock_offset" in r.getMessage()]
        assert [r.levelname for r in warnings] == ["WARNING", "WARNING"]
    finally:
        store.close()


def test_an_enqueue_through_one_daemon_wakes_another_and_wakeups_are_rate_limited(
    schema: str,
) -> None:
    clock = FakeClock(T0)
    a, b = _open(schema, clock), _open(schema, clock)
    woken = threading.Event()
    listener = b.listen(woken.set)
    try:
        assert listener.listening.wait(10)
        a.insert(_specs(1))
        assert woken.wait(10)  # a hint delivered by the server: no poll involved
        sent, t0 = a.notifier.sent, time.monotonic()
        for _ in range(50):  # a burst on one queue: one wake-up per 100 ms at most
            a.insert(_specs(1))
        assert a.notifier.sent - sent <= (time.monotonic() - t0) / 0.1 + 1
    finally:
        listener.close()
        a.close()
        b.close()


def test_a_daemon_skips_its_own_wakeups(schema: str) -> None:
    """Its own enqueue wakes its own timer directly (as on SQLite); its own ``NOTIFY``
    coming back cost a timer and a materializer pass, reads, ten times a second."""
    clock = FakeClock(T0)
    a, b = _open(schema, clock), _open(schema, clock)
    own: list[None] = []
    woken = threading.Event()
    mine, theirs = a.listen(lambda: own.append(None)), b.listen(woken.set)
    try:
        assert mine.listening.wait(10) and theirs.listening.wait(10)
        a.insert(_specs(1))
        assert woken.wait(10)  # the other daemon is woken
        skipped = threading.Event()
        for _ in range(500):  # delivered to both at once; bounded at about 5 s
            if mine.skipped:
                skipped.set()
                break
            skipped.wait(0.01)
        assert skipped.is_set() and own == []
    finally:
        mine.close()
        theirs.close()
        a.close()
        b.close()


def test_only_the_latest_sending_processes_are_skipped(schema: str) -> None:
    """A server process id may be reused by another daemon's connection: only the last
    ``SENDERS_KEPT`` the notifier sent from are kept, so one reused id costs at most a
    missed hint (the safety poll), never a growing share of another daemon's."""
    from jobctl.store.pg.notify import SENDERS_KEPT, Notifier

    store = _open(schema, FakeClock(T0))
    try:
        notifier = Notifier(store.db)
        for pid in range(1, SENDERS_KEPT + 11):
            notifier._sent_from(pid)
        notifier._sent_from(11)  # sent from again: the newest
        assert len(notifier.senders) == SENDERS_KEPT
        assert 10 not in notifier.senders and 12 in notifier.senders
        assert list(notifier.senders)[-1] == 11
    finally:
        store.close()


def test_wakeups_are_one_per_queue_per_cooldown(schema: str) -> None:
    from jobctl.store.pg.notify import Notifier

    store = _open(schema, FakeClock(T0))
    now = [100.0]
    later: list[tuple[float, Callable[[], None]]] = []

    def record(delay: float, fn: Callable[[], None]) -> Any:
        later.append((delay, fn))
        return threading.Timer(0, lambda: None)  # never started: cancel() is a no-op

    try:
        notifier = Notifier(store.db, lambda: now[0], record)
        assert notifier.wake(["q"])
        assert not notifier.wake(["q"])
        assert notifier.wake(["other", "q"])  # one NOTIFY for the queue not yet woken
        now[0] += 0.099
        assert not notifier.wake(["q"])
        now[0] += 0.002
        assert notifier.wake(["q"])  # sent now: no longer owed
        assert notifier.sent == 3
        assert [round(d, 3) for d, _ in later] == [0.1]  # one trailing wake-up was set
        later[0][1]()
        assert notifier.sent == 3  # ... and found nothing owed
    finally:
        store.close()


def test_a_wakeup_asked_for_within_the_cooldown_is_sent_when_it_ends(schema: str) -> None:
    """Not dropped: the cooldown delays it. (Dropped, a job enqueued right after another
    waited for the other daemons' one-second safety poll.)"""
    from jobctl.store.pg.notify import COOLDOWN, Notifier

    store = _open(schema, FakeClock(T0))
    now = [100.0]
    later: list[tuple[float, Callable[[], None]]] = []

    def record(delay: float, fn: Callable[[], None]) -> Any:
        later.append((delay, fn))
        return threading.Timer(0, lambda: None)

    try:
        notifier = Notifier(store.db, lambda: now[0], record)
        assert notifier.wake(["q"])
        now[0] = 100.03
        assert not notifier.wake(["q"])
        assert notifier.wake(["r"]) and not notifier.wake(["r"])  # r's first, then owed
        assert len(later) == 1 and later[0][0] == pytest.approx(COOLDOWN - 0.03)
        now[0] = 100.125  # the timer ran: q's cooldown is over, r's is not
        later[0][1]()
        assert notifier.sent == 3
        assert len(later) == 2 and later[1][0] == pytest.approx(0.005)
        now[0] = 100.2
        later[1][1]()
        assert notifier.sent == 4
        assert not notifier.wake(["r"])  # the trailing one started a cooldown of its own
    finally:
        store.close()


def test_a_second_enqueue_within_the_cooldown_still_wakes_the_other_daemon(schema: str) -> None:
    clock = FakeClock(T0)
    a, b = _open(schema, clock), _open(schema, clock)
    wakes: list[float] = []
    woken = threading.Condition()

    def on_wake() -> None:
        with woken:
            wakes.append(time.monotonic())
            woken.notify_all()

    listener = b.listen(on_wake)
    try:
        assert listener.listening.wait(10)
        a.insert(_specs(1))
        a.insert(_specs(1))  # within 100 ms of the first: its wake-up comes when that ends
        with woken:
            assert woken.wait_for(lambda: len(wakes) >= 2, timeout=5), wakes
    finally:
        listener.close()
        a.close()
        b.close()


def test_without_listen_nothing_is_listened_to(schema: str) -> None:
    store = _open(schema, FakeClock(T0))
    try:
        listener = store.listen(lambda: None, poll_only=True)
        assert not listener.listening.wait(0.2)
        listener.close()
    finally:
        store.close()


def test_heartbeats_are_not_starved_by_a_busy_pool(schema: str) -> None:
    """Every connection of the main pool held (a burst of reads, a slow client): the
    leases still renew, on their own pool."""
    clock = FakeClock(T0)
    store = _open(schema, clock)
    release = threading.Event()
    held = threading.Barrier(5)

    def hold() -> None:
        with store.db.pool.connection():
            held.wait()
            release.wait(30)

    holders = [threading.Thread(target=hold) for _ in range(4)]  # the pool's size
    try:
        store.insert(_specs(3))
        claims = store.claim_due("w", 3, 30)
        for t in holders:
            t.start()
        held.wait(10)
        t0 = time.monotonic()
        assert store.heartbeat([(c.job.id, c.generation) for c in claims], 30) == []
        assert time.monotonic() - t0 < 5
    finally:
        release.set()
        for t in holders:
            t.join()
        store.close()
