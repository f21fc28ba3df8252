"""A PostgreSQL store in a schema of its own, and a count of the queries it asks for:
for the PostgreSQL-only tests that check round trips (test_pg_inserts, test_pg_audit)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from jobctl.domain.clock import FakeClock
from tests.contract.conftest import PG_DSN, pg_schema

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def pg_store() -> Iterator[Any]:
    """One store on a fresh schema (a fixture's body: ``yield from pg_store()``)."""
    from jobctl.store.pg.store import PostgresStore

    for schema in pg_schema():
        s = PostgresStore(PG_DSN, FakeClock(T0), random.Random(3), schema=schema, pool_size=2)
        try:
            yield s
        finally:
            s.close()


def count_queries(store: Any) -> Counter[str]:
    """Counts of the named queries ``store`` asks for from now on."""
    counts: Counter[str] = Counter()
    real = store.db.q

    def q(name: str) -> str:
        counts[name] += 1
        return str(real(name))

    store.db.q = q
    return counts


class RoundTrips:
    """Round trips to the server, counted while a :func:`round_trips` block runs."""

    def __init__(self) -> None:
        self.n = 0


#: What psycopg waits on for an answer: a pipeline's fetch and sync, and, outside a
#: pipeline, a statement, a transaction's BEGIN or COMMIT (its generators' names).
_PIPELINED = frozenset(
    ("BasePipeline._fetch_gen", "BasePipeline._sync_gen", "BasePipeline._exit_gen")
)
_PLAIN = frozenset(
    ("BaseCursor._execute_gen", "BaseTransaction._enter_gen", "BaseTransaction._exit_gen")
)


@contextmanager
def round_trips(threads: str = "") -> Iterator[RoundTrips]:
    """Count the round trips of the connections used by the threads whose names start
    with ``threads`` (default: all): each ``Connection.wait`` on one of psycopg's
    generators that waits for the server's answer, and each
    :meth:`jobctl.store.pg.rawpipe.Pipe.run` (the pipelined commit's, through libpq). Leans
    on psycopg's internals (its generators' names): :func:`check_round_trips` fails loudly
    when they move. A
    statement that opens a transaction by itself (psycopg's implicit ``BEGIN``) counts as
    one: the store's transactions begin explicitly."""
    import threading

    import psycopg

    from jobctl.store.pg.rawpipe import Pipe

    trips = RoundTrips()
    real: Any = psycopg.Connection.wait
    real_run: Any = Pipe.run

    def run(pipe: Pipe) -> None:
        if threading.current_thread().name.startswith(threads):
            trips.n += 1
        real_run(pipe)

    def wait(conn: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
        name = gen.gi_code.co_qualname
        mine = threading.current_thread().name.startswith(threads)
        if mine and (name in _PIPELINED or (conn._pipeline is None and name in _PLAIN)):
            trips.n += 1
        return real(conn, gen, *args, **kwargs)

    setattr(psycopg.Connection, "wait", wait)  # noqa: B010 - patched for the block only
    setattr(Pipe, "run", run)  # noqa: B010
    try:
        yield trips
    finally:
        setattr(psycopg.Connection, "wait", real)  # noqa: B010
        setattr(Pipe, "run", real_run)  # noqa: B010


def check_round_trips(dsn: str) -> None:
    """The counter sees psycopg's round trips: BEGIN, a statement and COMMIT are three,
    and a pipeline of two statements is one; so is a :class:`Pipe` of two."""
    import psycopg

    from jobctl.store.pg.rawpipe import Pipe

    with psycopg.connect(dsn) as conn, round_trips() as trips:
        with conn.transaction():
            conn.execute("SELECT 1")
        assert trips.n == 3, trips.n
        with conn.pipeline():
            conn.execute("SELECT 1")
            conn.execute("SELECT 2")
        assert trips.n == 4, trips.n
        conn.pgconn.enter_pipeline_mode()
        pipe = Pipe(conn, 5.0)
        one, two = pipe.execute("SELECT $1::int", (1,)), pipe.execute("SELECT 2")
        pipe.run()
        conn.pgconn.exit_pipeline_mode()
        assert (pipe.rows(one), pipe.rows(two)) == ([(b"1",)], [(b"2",)])
        assert trips.n == 5, trips.n
