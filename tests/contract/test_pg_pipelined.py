"""PostgreSQL only: the pipelined group commit (store/pg/pipelined.py).

Single-job enqueues commit in one round trip (``BEGIN``, the queues' locks, the
``INSERT``, the audit rows and ``COMMIT``), without savepoints. A failure anywhere commits
nothing and the batch runs again the checked way (savepoints: each write's failure its
own), so a failing write sinks none of its neighbours and is never acknowledged; a
connection lost during the round trip is a 503 for every write of the batch (``COMMIT``
went out with the rest: it may have committed), except for callers whose jobs all carry
keys: they are sent again the checked way and answered as the lost commit would have
answered them (store/pg/resend.py); one the server ended while it sat in the pool is not
used.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import psycopg
import pytest

from jobctl.domain.audit import AuditRecord
from jobctl.domain.models import JobSpec
from jobctl.errors import InvalidInput, KeyConflict, StoreUnavailable
from jobctl.store.audit import audit_params
from jobctl.store.pg.pipelined import Staged
from jobctl.store.pg.rawpipe import Pipe, native
from tests.contract.conftest import PG_DSN
from tests.contract.pgcount import T0, check_round_trips, pg_store, round_trips
from tests.contract.pglose import (
    free_queue,
    hold_queue,
    stored_jobs,
    stored_keys,
    swallow_answers,
    wait_for,
    waits_for_a_lock,
)

pytestmark = pytest.mark.postgres


@pytest.fixture
def store() -> Iterator[Any]:
    yield from pg_store()


def _job() -> JobSpec:
    return JobSpec(("true",), T0, 1000)


def _rec(n: int) -> AuditRecord:
    return AuditRecord(T0, f"r-{n}", 1000, 100, 4242, "jobs", "queue:a", 201)


class _Rider:
    """A rider that always has a row to queue: where it lands, and how."""

    def __init__(self) -> None:
        self.queued = 0
        self.ridden = 0

    def ride(self, conn: Any, taken: list[Any]) -> None:
        self.ridden += 1

    def queue(self, conn: Any, taken: list[Any]) -> None:
        self.queued += 1

    def waiting(self) -> bool:
        return False

    def landed(self, taken: list[Any], ok: bool) -> None:
        return None


class _Note(Staged[str]):
    """A write of one audit row (an effect the test can count), pipelined when asked;
    ``fail`` makes the server refuse it after the row, ``kill`` ends its own connection
    after the row (in the round trip, before ``COMMIT``), ``block`` makes it wait for an
    advisory lock the test holds, after its row."""

    def __init__(
        self, store: Any, n: int, fail: bool = False, kill: bool = False, block: bool = False
    ) -> None:
        self.db = store.db
        self.n = n
        self.fail = fail
        self.kill = kill
        self.block = block
        self.checked = 0  # runs the checked way

    def stage(self) -> bool:
        return True

    def queue(self, pipe: Pipe) -> None:
        row = audit_params(_rec(self.n))
        pipe.execute(native(self.db.q("insert_audit"), tuple(row)), list(row.values()))
        if self.fail:
            pipe.execute("SELECT 1 / 0")
        if self.kill:
            self.kill = False  # once: the checked way's run is not killed
            # After a pause, so that the whole round trip (COMMIT included) has gone out
            # before the session ends, however slow the client thread.
            pipe.execute(
                "SELECT pg_terminate_backend(pg_backend_pid()) FROM (SELECT pg_sleep(0.3)) s"
            )
        if self.block:  # waits for the test's advisory lock
            pipe.execute("SELECT pg_advisory_xact_lock(4242)")
        self.pipe, self.read = pipe, pipe.execute("SELECT 1 AS one")

    def answer(self) -> str:
        assert self.pipe.rows(self.read) == [(b"1",)]  # fetched in the round trip
        return f"r-{self.n}"

    def __call__(self, conn: Any) -> str:
        self.checked += 1
        self._write(conn)
        return f"r-{self.n}"

    def _write(self, conn: Any) -> None:
        conn.execute(self.db.q("insert_audit"), audit_params(_rec(self.n)))
        if self.fail:
            conn.execute("SELECT 1 / 0")


def _run(store: Any, *ops: Any) -> list[Future[Any]]:
    """``ops`` as one batch of the group commit (as its thread would take them)."""
    batch: list[tuple[Any, Future[Any]]] = [(op, Future()) for op in ops]
    store.db.commits._commit(batch, store.db.commit_pools[0])
    return [fut for _, fut in batch]


def _ids(store: Any) -> list[str]:
    return sorted(r.request_id for r in store.list_audit(limit=100))


def test_the_round_trip_counter_sees_psycopgs_round_trips() -> None:
    check_round_trips(PG_DSN)


class _Quiet:
    def wake(self, queues: Any) -> bool:
        return False


def test_single_job_enqueues_commit_in_one_round_trip_with_the_rider(store: Any) -> None:
    rider = store.db.commits.rider = _Rider()
    store._inserts._notifier = _Quiet()  # no NOTIFY after the commit (its own 2 trips)
    store.insert([_job()])
    with round_trips("jobctl-pg-commit") as trips:  # not the pool's own connecting
        out = store.submit_insert_groups([[_job()] for _ in range(6)]).result()
    assert all(o[0].created for o in out)
    assert trips.n == 1  # BEGIN, locks, INSERT, the rider's rows, COMMIT (was 2, then 5)
    assert rider.queued == 2 and rider.ridden == 0  # in the pipeline, no savepoint
    assert len({store.get(o[0].job.id).id for o in out}) == 6


def _keyed(key: str, owner: int = 1000, command: str = "true") -> JobSpec:
    return JobSpec((command,), T0, owner, key=key)


def test_keyed_single_job_enqueues_commit_in_one_round_trip_too(store: Any) -> None:
    """New keys (two owners may use one key) go in the one round trip, with their
    bodies' fingerprints, so a repeat later finds them as the checked way stores them."""
    store._inserts._notifier = _Quiet()
    store.insert([_job()])
    groups = [[_keyed("a")], [_keyed("b")], [_keyed("a", owner=1001)]]
    with round_trips("jobctl-pg-commit") as trips:
        out = store.submit_insert_groups(groups).result()
    assert trips.n == 1
    assert all(o[0].created for o in out) and len({o[0].job.id for o in out}) == 3
    assert [(o[0].job.spec.owner_uid, o[0].job.key) for o in out] == [
        (1000, "a"),
        (1000, "b"),
        (1001, "a"),
    ]
    again = store.submit_insert_groups([[_keyed("a")], [_keyed("c")]]).result()
    assert not again[0][0].created and again[0][0].job.id == out[0][0].job.id
    assert again[1][0].created  # its neighbour is stored once, the checked way
    with pytest.raises(KeyConflict):
        store.insert([_keyed("b", command="false")])  # another body, the same key


def test_a_key_twice_in_one_write_is_one_job(store: Any) -> None:
    out = store.submit_insert_groups([[_keyed("twice")], [_keyed("twice")]]).result()
    assert out[0][0].created and not out[1][0].created
    assert out[0][0].job.id == out[1][0].job.id


def test_a_row_the_server_refuses_sinks_only_its_own_group(store: Any) -> None:
    bad = _job()
    object.__setattr__(bad, "max_attempts", 0)  # the table's CHECK refuses it, not Python
    store.audit([_rec(1), _rec(2)])  # riding along with the failed commit, then the next
    out = store.submit_insert_groups([[_job()], [bad], [_job()]]).result()
    assert isinstance(out[1], InvalidInput)
    assert out[0][0].created and out[2][0].created
    store.flush_audit()
    assert len(store.list_jobs(None, None, 10, None)) == 2  # the pipelined try: nothing
    assert _ids(store) == ["r-1", "r-2"]  # each record once


def test_a_failing_write_in_a_pipelined_batch_is_its_own_failure(store: Any) -> None:
    good, bad, other = _Note(store, 1), _Note(store, 2, fail=True), _Note(store, 3)
    futures = _run(store, good, bad, other)
    assert futures[0].result() == "r-1" and futures[2].result() == "r-3"
    with pytest.raises(psycopg.errors.DivisionByZero):
        futures[1].result()
    assert [good.checked, bad.checked, other.checked] == [1, 1, 1]  # redone, checked
    assert _ids(store) == ["r-1", "r-3"]  # once each; nothing of the bad one


def test_a_connection_the_server_ended_in_the_pool_is_not_used(store: Any) -> None:
    """Sent to a dead connection, the whole transaction would be a 503 (it cannot be
    told from one lost after it committed): the server's farewell on the socket is seen
    first, and the batch goes pipelined on a fresh connection."""
    with store.db.commit_pools[0].connection() as one:  # the committer's connection
        pids = [one.info.backend_pid]
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        for pid in pids:  # waits (up to 5 s) until each is gone
            assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone()
    first, second = _Note(store, 1), _Note(store, 2)
    assert [f.result() for f in _run(store, first, second)] == ["r-1", "r-2"]
    assert first.checked == 0 and second.checked == 0  # not the checked way's redo
    assert _ids(store) == ["r-1", "r-2"]


def test_a_connection_lost_during_the_round_trip_is_unavailable_to_all(store: Any) -> None:
    """``COMMIT`` went out with the rest: the client cannot know whether it ran (here the
    server ended the session before it did)."""
    lost, other = _Note(store, 1, kill=True), _Note(store, 2)
    futures = _run(store, lost, other)
    for fut in futures:
        with pytest.raises(StoreUnavailable):
            fut.result()
    assert lost.checked == 0 and other.checked == 0  # not run again: nobody is told
    assert _ids(store) == []
    assert _run(store, _Note(store, 3))[0].result() == "r-3"  # the pool serves on


def test_a_connection_lost_after_commit_was_sent_is_unavailable_to_all(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server process waits on a lock the test holds, behind it ``COMMIT`` was sent;
    the test ends that process then: the client cannot know whether it committed."""
    real = Pipe._flush

    def flush(pipe: Any) -> None:
        real(pipe)  # everything went out, COMMIT included: now the connection is lost
        admin.execute("SELECT pg_terminate_backend(%s)", (pipe._conn.info.backend_pid,))

    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        admin.execute("SELECT pg_advisory_lock(4242)")
        monkeypatch.setattr(Pipe, "_flush", flush)
        lost, other = _Note(store, 1, block=True), _Note(store, 2)
        futures = _run(store, lost, other)
        monkeypatch.undo()
    for fut in futures:
        with pytest.raises(StoreUnavailable):
            fut.result()  # it may have committed: nobody is told it did
    assert lost.checked == 0 and other.checked == 0  # not run again either
    assert _ids(store) == []  # here the server ended it before COMMIT ran
    assert _run(store, _Note(store, 3))[0].result() == "r-3"


def test_a_connection_is_handed_back_to_the_pool_as_lent(store: Any) -> None:
    _run(store, _Note(store, 1, fail=True))
    for _ in range(3):
        with store.db.commit_pools[0].connection() as conn:  # the one _run wrote on
            assert not conn.autocommit
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


# -- keyed enqueues lost once sent: sent again (store/pg/resend.py) ------------------------


def _insert_pipes(monkeypatch: pytest.MonkeyPatch, then: Any) -> None:
    """``then(pipe)`` once, right after the first pipelined commit that inserts jobs has
    sent everything (its COMMIT included); other pipelined commits (the idle rider's) pass."""
    real_execute, real_flush = Pipe.execute, Pipe._flush

    def execute(pipe: Any, text: str, params: Any = ()) -> int:
        if "INSERT INTO jobs" in text:
            pipe.inserting = True
        return real_execute(pipe, text, params)

    def flush(pipe: Any) -> None:
        real_flush(pipe)
        if getattr(pipe, "inserting", False):
            monkeypatch.undo()  # once: the second run is not lost
            then(pipe)

    monkeypatch.setattr(Pipe, "execute", execute)
    monkeypatch.setattr(Pipe, "_flush", flush)


def _lost_after_commit(monkeypatch: pytest.MonkeyPatch, peer: Any, schema: str, key: str) -> None:
    """The next inserting commit goes through on the server (``key`` is seen stored), and
    its answers are lost on the way back."""

    def lose(pipe: Any) -> None:
        wait_for(lambda: stored_keys(peer, schema, key) == 1)
        swallow_answers(pipe)

    _insert_pipes(monkeypatch, lose)


def _lost_before_commit(monkeypatch: pytest.MonkeyPatch, peer: Any, schema: str) -> None:
    """The next inserting commit waits for the default queue's lock (the test holds it),
    COMMIT sent behind it; its server process is ended then (nothing commits), and the
    lock freed for the second run."""
    hold_queue(peer, schema, "default")

    def lose(pipe: Any) -> None:
        pid = pipe._conn.info.backend_pid
        wait_for(lambda: waits_for_a_lock(peer, pid))
        assert peer.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone()
        free_queue(peer, schema, "default")

    _insert_pipes(monkeypatch, lose)


@pytest.fixture
def peer() -> Iterator[Any]:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        yield conn


def test_a_keyed_write_lost_after_it_committed_answers_created_once(
    store: Any, peer: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """COMMIT ran, its answers were lost: the write is sent again the checked way on a
    fresh connection, which finds every job of it stored by that commit: each caller gets
    what that commit would have answered (created, the same job), and nothing is stored
    twice; the audit record that commit carried is stored once."""
    store._inserts._notifier = _Quiet()
    store.insert([_job()])
    store.audit([_rec(1)])  # rides the lost commit
    _lost_after_commit(monkeypatch, peer, store.db.schema, "k1")
    out = store.submit_insert_groups([[_keyed("k1")], [_keyed("k2")]]).result()
    assert [o[0].created for o in out] == [True, True]  # 201, as a first answer
    for o in out:
        assert o[0].job == store.get(o[0].job.id)  # what a fresh insert answers
    assert [stored_keys(peer, store.db.schema, k) for k in ("k1", "k2")] == [1, 1]
    assert len(store.list_jobs(None, None, 10, None)) == 3
    assert sum("event=pg_pipelined_resent" in r.message for r in caplog.records) == 1
    store.flush_audit()
    assert _ids(store) == ["r-1"]  # the lost commit stored it: not again
    again = store.insert([_keyed("k1")])[0]  # a real repeat, later: 200
    assert not again.created and again.job.id == out[0][0].job.id


def test_a_keyed_write_lost_before_its_commit_ran_is_stored_by_the_second_run(
    store: Any, peer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store._inserts._notifier = _Quiet()
    store.insert([_job()])
    store.audit([_rec(1)])
    _lost_before_commit(monkeypatch, peer, store.db.schema)
    (out,) = store.submit_insert_groups([[_keyed("k1")]]).result()
    assert isinstance(out, list) and out[0].created
    assert out[0].job == store.get(out[0].job.id)
    assert stored_keys(peer, store.db.schema, "k1") == 1
    store.flush_audit()
    assert _ids(store) == ["r-1"]  # not stored by the lost commit: by a later one, once


def test_a_repeated_key_lost_before_its_commit_ran_answers_the_stored_job(
    store: Any, peer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second run finds the key stored earlier (not by the lost commit: another
    time): the stored job, not created (200), as a first answer would have been."""
    store._inserts._notifier = _Quiet()
    first = store.insert([_keyed("k1")])[0]
    store.db.clock.advance(1)
    _lost_before_commit(monkeypatch, peer, store.db.schema)
    (out,) = store.submit_insert_groups([[_keyed("k1")]]).result()
    assert isinstance(out, list) and not out[0].created and out[0].job.id == first.job.id
    assert stored_keys(peer, store.db.schema, "k1") == 1


def test_a_mixed_write_lost_sends_only_its_keyed_callers_again(
    store: Any, peer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller with a job without a key is told 503 (its job may be stored: sent again
    it could be stored twice); the keyed caller of the same write gets its job."""
    from jobctl.store.pg.insertbatch import _InsertWrite

    store._inserts._notifier = _Quiet()
    store.insert([_job()])
    keyed, unkeyed = Future[Any](), Future[Any]()
    callers: list[Any] = [([[_keyed("k1")]], keyed), ([[_job()]], unkeyed)]
    write = _InsertWrite(store.db, lambda: callers)
    _lost_after_commit(monkeypatch, peer, store.db.schema, "k1")
    (done,) = _run(store, write)
    (outcome,) = done.result()  # the keyed caller's group only
    assert isinstance(outcome, list) and outcome[0].created
    assert write.taken == [callers[0]]
    with pytest.raises(StoreUnavailable):
        unkeyed.result()
    assert stored_keys(peer, store.db.schema, "k1") == 1


def test_an_unkeyed_write_lost_after_it_committed_is_unavailable_not_sent_again(
    store: Any, peer: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Why jobs without keys are never sent again: this commit did store the job."""
    store._inserts._notifier = _Quiet()
    store.insert([_job()])

    def lose(pipe: Any) -> None:
        wait_for(lambda: stored_jobs(peer, store.db.schema) == 2)  # COMMIT ran
        swallow_answers(pipe)

    _insert_pipes(monkeypatch, lose)
    with pytest.raises(StoreUnavailable):
        store.insert([_job()])
    assert not any("event=pg_pipelined_resent" in r.message for r in caplog.records)
    assert len(store.list_jobs(None, None, 10, None)) == 2  # stored once, not twice


def test_a_keyed_write_without_a_connection_is_unavailable_at_once(
    store: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing was sent: no second try (it would only wait for a connection again, and
    double the wait of every 503 while the database is away)."""
    from jobctl.store.pg.insertbatch import _InsertWrite

    pool = store.db.commit_pools[0]
    monkeypatch.setattr(pool, "timeout", 0.3)
    write = _InsertWrite(store.db, lambda: [([[_keyed("k1")]], Future[Any]())])
    with pool.connection():  # the committer's only one, held
        (done,) = _run(store, write)
    with pytest.raises(StoreUnavailable):
        done.result()
    assert not any("event=pg_pipelined_resent" in r.message for r in caplog.records)
