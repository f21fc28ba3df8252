"""PostgreSQL only: making a queue a worker queue and inserting a command job into it, by
two stores (two daemons' connections) interleaved, never leave both kinds in the queue.

One transaction is held open right after its check and write (the store's own code, the
commit withheld); the other store's write is then started and must wait for it (its
lock shows as not granted in ``pg_locks``), then see it committed and be refused. Before
the queue locks of jobctl.store.workerq the second write did not wait: it checked a
snapshot without the first one's change and let a command job into a worker queue.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobSpec
from jobctl.domain.workers import payload_text
from jobctl.errors import Conflict
from tests.contract.conftest import PG_DSN, pg_schema

pytestmark = pytest.mark.postgres
T0 = datetime(2030, 1, 1, tzinfo=UTC)
Q = "raced"


@pytest.fixture
def stores() -> Iterator[tuple[Any, Any]]:
    from jobctl.store.pg.store import PostgresStore

    for schema in pg_schema():
        clock = FakeClock(T0)
        a, b = (
            PostgresStore(PG_DSN, clock, random.Random(i), schema=schema, pool_size=2)
            for i in range(2)
        )
        try:
            yield a, b
        finally:
            a.close()
            b.close()


def _cmd() -> JobSpec:
    return JobSpec(command=("true",), run_at=T0, owner_uid=1000, queue=Q)


def _payload() -> JobSpec:
    return JobSpec(command=(), payload=payload_text({"n": 1}), run_at=T0, owner_uid=1000, queue=Q)


def _mark(store: Any, conn: Any) -> None:
    from jobctl.store.pg.schedconn import PgSchedConn
    from jobctl.store.workerq import mark

    mark(PgSchedConn(store.db, conn), Q)


def _insert(specs: list[JobSpec]) -> Callable[[Any, Any], None]:
    def run(store: Any, conn: Any) -> None:
        from jobctl.store.pg.inserts import insert_groups_tx

        [outcome] = insert_groups_tx(store.db, conn, [specs])
        assert isinstance(outcome, list), outcome

    return run


def _hold(store: Any, step: Callable[[Any, Any], None]) -> tuple[threading.Event, Future[None]]:
    """Run ``step`` in a transaction of ``store`` and keep it open until the event is set."""
    done, release = threading.Event(), threading.Event()
    fut: Future[None] = Future()

    def tx(conn: Any) -> None:
        step(store, conn)
        done.set()
        release.wait(60)

    def run() -> None:
        try:
            store.db.transaction(tx)
            fut.set_result(None)
        except BaseException as exc:
            fut.set_exception(exc)
            done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(60)
    return release, fut


def _waits_or_ends(fut: Future[Any]) -> bool:
    """True once another transaction waits for an advisory lock; False if ``fut`` ended
    first (the old code: the second write did not wait)."""
    with psycopg.connect(PG_DSN, autocommit=True) as watch:
        while not fut.done():
            row = watch.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            ).fetchone()
            if row and row[0]:
                return True
            threading.Event().wait(0.01)  # a poll of the server's lock table, not a delay
    return False


def _background(fn: Callable[[], Any]) -> Future[Any]:
    fut: Future[Any] = Future()

    def run() -> None:
        try:
            fut.set_result(fn())
        except BaseException as exc:
            fut.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return fut


@pytest.mark.parametrize("first", [_mark, _insert([_payload()])], ids=["mark", "payload"])
def test_a_command_job_waits_for_the_marking_and_is_refused(
    stores: tuple[Any, Any], first: Callable[[Any, Any], None]
) -> None:
    a, b = stores
    release, held = _hold(a, first)
    inserted = _background(lambda: b.insert([_cmd()]))
    waited = _waits_or_ends(inserted)
    release.set()
    held.result(30)
    with pytest.raises(Conflict, match="served by workers"):
        inserted.result(30)
    assert waited
    assert Q in b.worker_queues()
    assert [j.spec.payload is not None for j in b.list_jobs(None, Q, 10, None)] == (
        [True] if first is not _mark else []
    )


def test_the_marking_waits_for_a_command_job_and_is_refused(stores: tuple[Any, Any]) -> None:
    a, b = stores
    release, held = _hold(a, _insert([_cmd()]))
    marked = _background(lambda: b.set_worker_queue(Q, None))
    waited = _waits_or_ends(marked)
    release.set()
    held.result(30)
    with pytest.raises(Conflict, match="command or http jobs waiting"):
        marked.result(30)
    assert waited and Q not in b.worker_queues()
