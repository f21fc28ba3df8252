"""PostgreSQL only: the pipelined commit's statements through libpq (store/pg/rawpipe.py).

What psycopg did for the pipelined commit and the pipe now does itself: parameters as
psycopg's text, each statement prepared once per session (and prepared again when its
first prepare did not run), answers read up to the sync, a failure or a silent server
told apart, and the connection left as psycopg expects it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from jobctl.store.pg.rawpipe import Broken, Failed, Pipe, native
from tests.contract.conftest import PG_DSN
from tests.contract.pglose import swallow_answers

pytestmark = pytest.mark.postgres


@pytest.fixture
def conn() -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(PG_DSN, autocommit=True) as c:
        yield c


def _pipe(conn: psycopg.Connection[tuple[object, ...]], wait: float = 5.0) -> Pipe:
    conn.pgconn.enter_pipeline_mode()
    return Pipe(conn, wait)


def _done(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    conn.pgconn.exit_pipeline_mode()


def _prepared(conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    rows = conn.execute("SELECT statement FROM pg_prepared_statements WHERE name LIKE 'jobctl_%'")
    return sorted(str(r[0]) for r in rows)


def test_parameters_go_as_psycopgs_text_and_rows_come_back_as_text(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    pipe = _pipe(conn)
    one = pipe.execute("SELECT $1::text, $2::int, $3::text, $4::bigint", ("é a", -5, None, 2**40))
    pipe.run()
    _done(conn)
    assert pipe.rows(one) == [("é a".encode(), b"-5", None, b"1099511627776")]


def test_a_value_it_cannot_send_is_refused_before_anything_is_queued(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    pipe = _pipe(conn)
    with pytest.raises(ValueError, match="NUL"):
        pipe.execute("SELECT $1::text", ("a\x00b",))
    with pytest.raises(TypeError):
        pipe.execute("SELECT $1::text", (1.5,))
    with pytest.raises(TypeError):
        pipe.execute("SELECT $1::text", (True,))  # psycopg sends a bool, not an int
    two = pipe.execute("SELECT 2")
    pipe.run()  # only what was queued: its answer, nothing of the refused ones
    _done(conn)
    assert pipe.rows(two) == [(b"2",)]


def test_a_statement_is_prepared_once_per_session(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    for n in range(3):
        pipe = _pipe(conn)
        got = pipe.execute("SELECT $1::int + 1", (n,))
        again = pipe.execute("SELECT $1::int + 1", (10,))  # the same text, one pipe
        pipe.run()
        _done(conn)
        assert (pipe.rows(got), pipe.rows(again)) == ([(str(n + 1).encode(),)], [(b"11",)])
    assert _prepared(conn) == ["SELECT $1::int + 1"]


def test_a_failure_skips_the_rest_and_their_prepares_are_not_remembered(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    pipe = _pipe(conn)
    pipe.execute("SELECT 1 / $1::int", (0,))
    pipe.execute("SELECT $1::int * 3", (2,))  # skipped: its prepare never ran
    with pytest.raises(Failed, match="division by zero"):
        pipe.run()
    _done(conn)
    assert _prepared(conn) == ["SELECT 1 / $1::int"]
    pipe = _pipe(conn)
    got = pipe.execute("SELECT $1::int * 3", (2,))  # prepared now, not "does not exist"
    pipe.run()
    _done(conn)
    assert pipe.rows(got) == [(b"6",)]


def test_a_transaction_in_the_pipe_commits_or_rolls_back_whole(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    conn.execute("CREATE TEMP TABLE t (n int)")
    pipe = _pipe(conn)
    for text, params in (("BEGIN", ()), ("INSERT INTO t VALUES ($1)", (1,)), ("COMMIT", ())):
        pipe.execute(text, params)
    pipe.run()
    pipe = Pipe(conn, 5.0)  # still in pipeline mode
    pipe.execute("BEGIN")
    pipe.execute("INSERT INTO t VALUES ($1)", (2,))
    pipe.execute("SELECT 1 / 0")
    pipe.execute("COMMIT")
    with pytest.raises(Failed):
        pipe.run()
    _done(conn)
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
    conn.execute("ROLLBACK")
    assert [r[0] for r in conn.execute("SELECT n FROM t")] == [1]


def test_a_server_that_does_not_answer_in_time_is_a_broken_connection(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    pipe = _pipe(conn, wait=0.2)
    pipe.execute("SELECT pg_sleep(1)")
    with pytest.raises(Broken, match="no answer"):
        pipe.run()
    conn.close()  # as the pipelined commit does: a connection in this state is not lent


def test_a_connection_ended_by_the_server_is_a_broken_connection(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    pipe = _pipe(conn)
    pipe.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    with pytest.raises(Broken):
        pipe.run()
    assert conn.broken


def test_native_placeholders() -> None:
    text = "SELECT %(b)s, %(a)s, %(b)s, %s, '100%%'"
    assert native(text, ("a", "b")) == "SELECT $2, $1, $2, $3, '100%'"


def test_a_connection_ended_from_outside_mid_pipeline_is_a_broken_connection(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    """The server's farewell arrives while statements are still unanswered (ended by
    another session, as a restart or ``pg_terminate_backend`` does): Broken, never an
    error of the pipe's own bookkeeping (which, raised into the daemon's futures as
    StopIteration, left a request unanswered for good)."""
    pid = conn.info.backend_pid
    pipe = _pipe(conn)
    for _ in range(3):
        pipe.execute("SELECT pg_sleep(0.2)")
    pipe.execute("SELECT 1")
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        ender = threading.Timer(0.1, admin.execute, ("SELECT pg_terminate_backend(%s)", (pid,)))
        ender.start()
        with pytest.raises(Broken):
            pipe.run()
        ender.join()


def test_statements_deallocated_behind_its_back_are_prepared_again(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    """psycopg answers a ROLLBACK with DEALLOCATE ALL on a connection where it prepared
    statements: the pipe's next run fails once (the checked way then runs), forgets its
    names, and the one after prepares them again."""
    for _ in range(2):
        pipe = _pipe(conn)
        pipe.execute("SELECT $1::int", (1,))
        pipe.run()
        _done(conn)
    conn.execute("DEALLOCATE ALL")
    pipe = _pipe(conn)
    pipe.execute("SELECT $1::int", (2,))
    with pytest.raises(Failed, match="does not exist"):
        pipe.run()
    _done(conn)
    pipe = _pipe(conn)
    got = pipe.execute("SELECT $1::int", (3,))
    pipe.run()
    _done(conn)
    assert pipe.rows(got) == [(b"3",)]


def test_answers_lost_after_the_commit_ran_are_a_broken_connection_and_it_stands(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    """Broken says nothing of whether the transaction committed: here it did. (Why a
    pipelined commit lost once sent is a 503, or sent again only when that is safe:
    store/pg/resend.py.)"""
    table = f"jobctl_lost_{conn.info.backend_pid}"
    conn.execute(f"CREATE TABLE {table} (n int)")
    try:
        pipe = _pipe(conn)
        for text in ("BEGIN", f"INSERT INTO {table} VALUES (1)", "COMMIT"):
            pipe.execute(text)
        real = pipe._flush

        def flush() -> None:
            real()
            swallow_answers(pipe)

        pipe._flush = flush  # type: ignore[method-assign]
        with pytest.raises(Broken):
            pipe.run()
        with psycopg.connect(PG_DSN, autocommit=True) as other:
            assert other.execute(f"SELECT count(*) FROM {table}").fetchone() == (1,)
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as other:
            other.execute(f"DROP TABLE {table}")
