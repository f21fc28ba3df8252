"""The writer's rider: rows that join the next commit, or commit alone when idle."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jobctl.store.writer import Writer


class Rows:
    """A rider writing numbers into table ``r``; records each commit's outcome."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.landed: list[bool] = []
        self.rode = threading.Event()

    def pending(self) -> bool:
        return bool(self.rows)

    def ride(self, conn: sqlite3.Connection) -> Callable[[bool], None] | None:
        taken, self.rows = self.rows, []
        if not taken:
            return None
        conn.executemany("INSERT INTO r VALUES (?)", [(n,) for n in taken])
        self.rode.set()
        return self.landed.append


def opener(tmp_path: Path) -> Callable[[], sqlite3.Connection]:
    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(tmp_path / "w.db", isolation_level=None, check_same_thread=False)
        conn.execute("CREATE TABLE IF NOT EXISTS r (n INTEGER)")
        conn.execute("CREATE TABLE IF NOT EXISTS other (n INTEGER)")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("CREATE TABLE IF NOT EXISTS parent (id INTEGER PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS child"
            " (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
        )
        return conn

    return connect


def writer(tmp_path: Path, rider: Rows, wait: float) -> Writer:
    return Writer(opener(tmp_path), rider=rider, ride_wait=wait)


def count(tmp_path: Path, table: str) -> int:
    with sqlite3.connect(tmp_path / "w.db") as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_rows_join_the_next_commit_without_one_of_their_own(tmp_path: Path) -> None:
    rider = Rows()
    w = writer(tmp_path, rider, wait=3600)  # an idle commit would take an hour
    try:
        rider.rows += [1, 2]
        w.nudge()
        w.call(lambda conn: conn.execute("INSERT INTO other VALUES (1)"))
        assert count(tmp_path, "r") == 2 and rider.landed == [True]
    finally:
        rider.rows.clear()
        w.close()


def test_an_idle_writer_commits_the_rows_after_the_ride_wait(tmp_path: Path) -> None:
    rider = Rows()
    w = writer(tmp_path, rider, wait=0.01)
    try:
        rider.rows.append(1)
        began = time.monotonic()
        w.nudge()
        assert rider.rode.wait(10)
        deadline = time.monotonic() + 10
        while not rider.landed and time.monotonic() < deadline:
            time.sleep(0.005)
        assert rider.landed == [True] and time.monotonic() - began >= 0.01
        assert count(tmp_path, "r") == 1
    finally:
        w.close()


def test_close_commits_what_still_waits(tmp_path: Path) -> None:
    rider = Rows()
    w = writer(tmp_path, rider, wait=3600)
    rider.rows.append(1)
    w.close()  # never nudged: close itself must not lose them
    assert count(tmp_path, "r") == 1


def test_a_failed_commit_tells_the_rider(tmp_path: Path) -> None:
    rider = Rows()
    w = writer(tmp_path, rider, wait=3600)
    try:
        rider.rows.append(1)

        def poison(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO child VALUES (99)")  # the COMMIT fails (deferred FK)

        with pytest.raises(sqlite3.IntegrityError):
            w.call(poison)
        assert rider.landed == [False] and count(tmp_path, "r") == 0
    finally:
        w.close()


def test_failing_commits_are_logged_once_a_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from jobctl.domain.clock import FakeClock
    from jobctl.lograte import RateLimitedLog

    clock = FakeClock()
    errors = RateLimitedLog(logging.getLogger("jobctl.store"), clock)
    w = Writer(opener(tmp_path), errors=errors)
    caplog.set_level(logging.INFO, logger="jobctl.store")
    try:
        for _ in range(5):  # a full disk: every commit fails, once a second
            with pytest.raises(sqlite3.IntegrityError):
                w.call(lambda conn: conn.execute("INSERT INTO child VALUES (99)"))
            clock.advance(1)
        w.call(lambda conn: conn.execute("INSERT INTO other VALUES (1)"))
    finally:
        w.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "jobctl.store"]
    assert lines == [
        'event=group_commit_failed writes=1 error="FOREIGN KEY constraint failed"',
        "event=group_commit_recovered failures=5",
    ]


class LateRows(Rows):
    """Adds a row right after the first commit took its rows, without a nudge: what the
    event loop does when it adds a row while the writer is busy committing."""

    def __init__(self) -> None:
        super().__init__()
        self.late = True

    def ride(self, conn: sqlite3.Connection) -> Callable[[bool], None] | None:
        landed = super().ride(conn)
        if self.late:
            self.late = False
            self.rows.append(8)
        return landed


def test_a_busy_writer_is_not_nudged_and_commits_rows_added_meanwhile(tmp_path: Path) -> None:
    """A nudge wakes only an idle writer; rows added during a commit are found by the
    writer before it waits again, and commit after the ride wait with no other write."""
    rider = LateRows()
    w = writer(tmp_path, rider, wait=0.01)
    inside, release = threading.Event(), threading.Event()

    def slow(conn: sqlite3.Connection) -> None:
        inside.set()
        assert release.wait(10)
        conn.execute("INSERT INTO other VALUES (1)")

    try:
        done = w.submit(slow)
        assert inside.wait(10)
        w.nudge()  # the writer is busy: nothing is queued for it
        assert w._queue.qsize() == 0
        release.set()
        done.result(10)
        deadline = time.monotonic() + 10
        while count(tmp_path, "r") != 1 and time.monotonic() < deadline:
            rider.rode.wait(0.01)
        assert count(tmp_path, "r") == 1 and not rider.rows
    finally:
        release.set()
        w.close()
