"""Writes submitted ``ahead`` commit before the rest of their batch (issue 17).

The executor's claim is such a write: the commands it claims wait for its commit, while
the finishes queued with it (the attempts that just ended, their slots already free)
wait for nothing. Sharing one transaction made every claim wait for the finishes' SQL.
"""

from __future__ import annotations

import sqlite3
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobSpec
from jobctl.store.sqlite import SqliteStore
from jobctl.store.writer import Writer
from tests.unit.test_writer_survives import held, insert, opener, rows


def test_an_ahead_write_commits_alone_before_the_writes_queued_before_it(
    tmp_path: Path,
) -> None:
    w = Writer(opener(tmp_path))
    try:
        seen: list[tuple[str, bool]] = []
        _, release = held(w)
        ahead: Future[int] | None = None

        def later(conn: sqlite3.Connection) -> int:
            assert ahead is not None
            seen.append(("tx", ahead.done()))  # answered: committed before this ran
            return insert(1)(conn)

        first = w.submit(later)
        ahead = w.submit(insert(2), ahead=True)
        release.set()
        assert (first.result(10), ahead.result(10)) == (1, 2)
        assert seen == [("tx", True)]
        assert rows(tmp_path) == [1, 2]
    finally:
        w.close()


def test_an_ahead_write_that_fails_leaves_the_rest_of_the_batch_to_commit(
    tmp_path: Path,
) -> None:
    w = Writer(opener(tmp_path))
    try:
        _, release = held(w)

        def boom(conn: sqlite3.Connection) -> None:
            raise ValueError("no")

        ok = w.submit(insert(3))
        bad = w.submit(boom, ahead=True)
        release.set()
        assert ok.result(10) == 3
        assert isinstance(bad.exception(10), ValueError)
        assert rows(tmp_path) == [3]
    finally:
        w.close()


def test_the_claim_commits_ahead_of_writes_queued_before_it(tmp_path: Path) -> None:
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    store = SqliteStore(tmp_path / "c.db", FakeClock(t0 + timedelta(seconds=1)))
    try:
        store.insert([JobSpec(command=("true",), run_at=t0, owner_uid=0)])
        seen: list[bool] = []
        _, release = held(store.db.writer)
        claim: Future[object] | None = None

        def other(conn: sqlite3.Connection) -> None:
            assert claim is not None
            seen.append(claim.done())

        store.db.submit(other)
        claim = store.submit_claim_rows("me", 16, 30.0)  # type: ignore[assignment]
        release.set()
        assert claim is not None
        found, _ = claim.result(10)  # type: ignore[misc]
        store.db.write(lambda conn: None)
        assert len(found) == 1 and seen == [True]
    finally:
        store.close()
