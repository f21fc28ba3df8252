"""PostgreSQL only: the store against the known failures of PostgreSQL job queues that
issue 15 names, each made to happen on a schema of the test's own:

- a hung statement (a lock held elsewhere) is cut by the session's ``statement_timeout``
  and a forgotten transaction by ``idle_in_transaction_session_timeout``: no timer call
  waits on it for longer than the bound;
- NOTIFY carries no payload (the 8,000-byte limit never matters);
- a connection the server closed (``pg_terminate_backend``, a restart) costs nobody an
  error: the transaction runs again on a fresh one;
- a database that cannot be reached is :class:`StoreUnavailable` within seconds, never a
  call hung for the pool's default 30 s, and the store works again once it is back;
- retention deleting an occurrence's job never lets that occurrence fire again (the
  evidence is the schedule's cursor, moved by compare-and-set, not the job).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, JobSpec, JobTemplate
from jobctl.domain.schedule import Policy, ScheduleSpec, Timing
from jobctl.domain.states import Outcome
from jobctl.errors import StoreUnavailable
from jobctl.store.pg import db as pgdb
from tests.contract.conftest import PG_DSN, pg_schema
from tests.integration.tcpcut import TcpCut

pytestmark = pytest.mark.postgres
T0 = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def schema() -> Iterator[str]:
    yield from pg_schema()


def _open(schema: str, clock: FakeClock, dsn: str = PG_DSN) -> Any:
    from jobctl.store.pg.store import PostgresStore

    return PostgresStore(dsn, clock, random.Random(), schema=schema, pool_size=4)


def _raw(schema: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(PG_DSN, autocommit=True, connect_timeout=5)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    return conn


def _spec() -> JobSpec:
    return JobSpec(("true",), T0, 1000)


def test_every_session_of_every_pool_bounds_statements_and_idle_transactions(
    schema: str,
) -> None:
    store = _open(schema, FakeClock(T0))
    try:
        for pool in (store.db.pool, store.db.lease_pool, *store.db.commit_pools):
            with pool.connection() as conn:
                shown = conn.execute(
                    "SELECT current_setting('statement_timeout') AS s,"
                    " current_setting('idle_in_transaction_session_timeout') AS i,"
                    " current_setting('synchronous_commit') AS c"
                ).fetchone()
            assert shown == {"s": "10s", "i": "30s", "c": "on"}
    finally:
        store.close()


def test_a_hung_statement_is_cut_and_the_heartbeat_does_not_wait_on_it(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another session holds the jobs table locked; the heartbeat's statement is cut by
    its (here shortened) statement_timeout: an error, quickly, never a timer stuck."""
    _open(schema, FakeClock(T0)).close()  # migrated under the usual bound
    monkeypatch.setattr(pgdb, "STATEMENT_TIMEOUT", 1.0)
    store = _open(schema, FakeClock(T0))
    holder = _raw(schema)
    try:
        store.insert([_spec()])
        claim = store.claim_due("w", 1, 30)[0]
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailable, match="statement timeout"):
            store.heartbeat([(claim.job.id, claim.generation)], 30)
        assert time.monotonic() - t0 < 5  # 1 s, and room for a loaded machine
        holder.execute("ROLLBACK")
        assert store.heartbeat([(claim.job.id, claim.generation)], 30) == []
    finally:
        holder.close()
        store.close()


def test_notify_carries_no_payload(schema: str) -> None:
    store = _open(schema, FakeClock(T0))
    listener = _raw(schema)
    try:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(store.db.channel)))
        store.insert([JobSpec(("echo", "x" * 9000), T0, 1000)])  # a big job: the hint is empty
        got = list(listener.notifies(timeout=5, stop_after=1))
        assert [n.payload for n in got] == [""]
    finally:
        listener.close()
        store.close()


def _terminate_store_connections(store: Any) -> int:
    """End the store's own idle connections from outside (never another test's)."""
    pids = []
    for pool in (store.db.pool, store.db.lease_pool, *store.db.commit_pools):
        with pool.connection() as conn:
            pids.append(conn.info.backend_pid)
    with psycopg.connect(PG_DSN, autocommit=True) as killer:
        for pid in pids:
            killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
    return len(pids)


def test_connections_the_server_closed_are_replaced_without_an_error(schema: str) -> None:
    store = _open(schema, FakeClock(T0))
    try:
        first = store.insert([_spec()])[0]
        claim = store.claim_due("w", 1, 30)[0]
        for _ in range(3):
            assert _terminate_store_connections(store) == 4  # main, leases, 2 committers
            assert first.job.id in {j.id for j in store.list_jobs(None, None, 10, None)}
            assert store.heartbeat([(claim.job.id, claim.generation)], 30) == []
            store.insert([_spec()])  # a write, before its commit was sent: run again
        assert len(store.list_jobs(None, None, 10, None)) == 4
    finally:
        store.close()


def test_a_database_out_of_reach_is_unavailable_fast_and_then_back(schema: str) -> None:
    server = urlsplit(PG_DSN)
    proxy = TcpCut((server.hostname or "127.0.0.1", server.port or 5432))
    dsn = urlunsplit(server._replace(netloc=f"{server.username}@127.0.0.1:{proxy.port}"))
    store = _open(schema, FakeClock(T0), dsn)
    try:
        store.insert([_spec()])
        proxy.cut()
        calls: list[Callable[[], object]] = [
            lambda: store.list_jobs(None, None, 10, None),
            lambda: store.insert([_spec()]),
            lambda: store.heartbeat([(1, 1)], 30),
        ]
        for call in calls:
            t0 = time.monotonic()
            with pytest.raises(StoreUnavailable, match="database is unavailable"):
                call()
            assert time.monotonic() - t0 < pgdb.POOL_TIMEOUT + pgdb.CONNECT_TIMEOUT + 2
        proxy.mend()
        deadline = time.monotonic() + 5
        while True:  # back by itself (the pool reconnects)
            try:
                store.insert([_spec()])
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline, "not back within 5 s"
                time.sleep(0.05)
        assert len(store.list_jobs(None, None, 10, None)) == 2  # the refused one is not there
    finally:
        store.close()
        proxy.close()


def test_retention_deleting_an_occurrences_job_never_fires_it_again(schema: str) -> None:
    clock = FakeClock(T0)
    a, b = _open(schema, clock), _open(schema, clock)
    try:
        spec = ScheduleSpec(
            Timing("UTC", every=60, anchor=T0), Policy(), JobTemplate(("true",)), 1000
        )
        a.create_schedule(spec)
        clock.set(T0 + timedelta(seconds=61))
        made = a.materialize(16).created
        assert len(made) == 1
        claim = a.claim_due("w", 1, 30)[0]
        a.finish(claim.job.id, claim.generation, AttemptResult(Outcome.SUCCEEDED, 0))
        clock.advance(1)
        assert a.prune({"succeeded": clock.now()}).total == 1
        assert a.list_jobs(None, None, 10, None) == []
        both: list[Any] = []
        gate = threading.Barrier(2)

        def again(store: Any) -> None:
            gate.wait()
            both.append(store.materialize(16).created)

        threads = [threading.Thread(target=again, args=(s,)) for s in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert both == [(), ()]  # the occurrence at T0+60 s is not made again
        clock.set(T0 + timedelta(seconds=121))
        assert len(b.materialize(16).created) == 1  # the next one is
    finally:
        a.close()
        b.close()


def test_a_schedule_id_another_daemon_holds_uncommitted_is_drawn_again(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two daemons mint ids apart (each its own process), so two may draw the same one in
    the same second; the other's row, not yet committed, is invisible to the check. The
    insert then waits for it, meets the unique index, and draws again: no error."""
    from jobctl.store import schedules

    store = _open(schema, FakeClock(T0))
    other = _raw(schema)
    spec = ScheduleSpec(Timing("UTC", every=60, anchor=T0), Policy(), JobTemplate(("true",)), 7)
    try:
        model = store.create_schedule(spec).id
        taken = "sch-00000000abcd"
        other.execute("BEGIN")
        for table in ("schedule_defs", "schedule_cursors"):  # as another daemon's insert
            _copy_row(other, schema, table, model, taken)
        drawn = iter([taken])
        real = schedules.new_schedule_id
        monkeypatch.setattr(
            schedules, "new_schedule_id", lambda now: next(drawn, None) or real(now)
        )
        made: list[Any] = []
        creating = threading.Thread(target=lambda: made.append(store.create_schedule(spec)))
        creating.start()
        creating.join(1)  # it waits on the other's row
        other.execute("COMMIT")
        creating.join(20)
        assert len(made) == 1 and made[0].id not in {taken, model}
        assert len(store.list_schedules()) == 3
    finally:
        other.close()
        store.close()


def _copy_row(conn: psycopg.Connection[Any], schema: str, table: str, src: str, dst: str) -> None:
    """Insert a copy of ``table``'s row ``id = src`` as ``id = dst``."""
    columns = [
        r[0]
        for r in conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (schema, table),
        )
    ]
    rest = sql.SQL(", ").join(sql.Identifier(c) for c in columns if c != "id")
    conn.execute(
        sql.SQL("INSERT INTO {t} (id, {rest}) SELECT %s, {rest} FROM {t} WHERE id = %s").format(
            t=sql.Identifier(table), rest=rest
        ),
        (dst, src),
    )
