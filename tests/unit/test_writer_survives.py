"""The writer thread survives whatever a caller does (issue 19, item 2).

A caller may cancel its future before the commit answers it (a client timeout, a
closing event loop), or hand the writer a function that raises something that is not
an ``Exception``. Neither may end the writer thread: the rest of the batch must still
be answered, and later writes must still commit.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError
from pathlib import Path

import pytest

from jobctl.store.writer import Writer


def opener(tmp_path: Path) -> Callable[[], sqlite3.Connection]:
    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(tmp_path / "w.db", isolation_level=None, check_same_thread=False)
        conn.execute("CREATE TABLE IF NOT EXISTS r (n INTEGER)")
        return conn

    return connect


def insert(n: int) -> Callable[[sqlite3.Connection], int]:
    def op(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO r VALUES (?)", (n,))
        return n

    return op


def rows(tmp_path: Path) -> list[int]:
    with sqlite3.connect(tmp_path / "w.db") as conn:
        return [int(n) for (n,) in conn.execute("SELECT n FROM r ORDER BY n")]


def held(writer: Writer) -> tuple[threading.Event, threading.Event]:
    """Occupy the writer with one op until the returned ``release`` is set, so that
    what is submitted meanwhile is queued and taken as one batch afterwards."""
    started, release = threading.Event(), threading.Event()

    def block(conn: sqlite3.Connection) -> None:
        started.set()
        release.wait(10)

    writer.submit(block)
    assert started.wait(10)
    return started, release


def test_a_future_cancelled_before_its_commit_leaves_the_batch_answered(tmp_path: Path) -> None:
    w = Writer(opener(tmp_path))
    try:
        _, release = held(w)
        first, gone, last = w.submit(insert(1)), w.submit(insert(2)), w.submit(insert(3))
        assert gone.cancel()
        release.set()
        assert first.result(10) == 1
        assert last.result(10) == 3  # before the fix: never answered, the thread was dead
        with pytest.raises(CancelledError):
            gone.result(0)
        assert w.call(insert(4)) == 4  # and the writer still serves
        assert rows(tmp_path) == [1, 2, 3, 4]  # the cancelled write ran: cancel is not undo
    finally:
        w.close()


def test_a_cancelled_bare_call_and_a_cancelled_failure_leave_the_writer_alive(
    tmp_path: Path,
) -> None:
    w = Writer(opener(tmp_path))
    try:
        _, release = held(w)

        def fails(conn: sqlite3.Connection) -> None:
            raise ValueError("refused by the op")

        failing = w.submit(fails)
        bare = w.submit(insert(5), bare=True)
        assert failing.cancel() and bare.cancel()
        release.set()
        assert w.call(insert(6)) == 6
        assert w.call(insert(7)) == 7  # a later batch: bare calls of the last one have run
        assert rows(tmp_path) == [5, 6, 7]
    finally:
        w.close()


@pytest.mark.parametrize("bare", [False, True])
def test_an_op_raising_a_base_exception_is_answered_with_it(tmp_path: Path, bare: bool) -> None:
    w = Writer(opener(tmp_path))
    try:

        def exits(conn: sqlite3.Connection) -> None:
            raise SystemExit(3)

        with pytest.raises(SystemExit):
            w.submit(exits, bare=bare).result(10)
        assert w.call(insert(7)) == 7
    finally:
        w.close()


def test_a_translate_that_raises_fails_its_batch_not_the_writer(tmp_path: Path) -> None:
    def broken(exc: BaseException) -> BaseException:
        raise RuntimeError("translate is broken")

    w = Writer(opener(tmp_path), translate=broken)
    try:

        def fails(conn: sqlite3.Connection) -> None:
            raise ValueError("op failed")

        with pytest.raises(RuntimeError, match="translate is broken"):
            w.call(fails)
        assert w.call(insert(8)) == 8
    finally:
        w.close()
