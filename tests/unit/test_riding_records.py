"""A quick command's process record rides with its finish (issue 17, branch pipeline).

The executor hands the store, for a command that ended before its pid was written, the
record and the finish together. SQLite writes a success's record with the statement that
ends its attempt (one write of the row, not ``record_processes`` then
``succeed_attempts``); every other record is written first, as before. These tests hold
that path equal to the plain one (records, then finishes) on real files, item by item.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, Claim, JobSpec, ProcessRecord
from jobctl.domain.states import Outcome
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore

OWNER = "host:1:test"
OK = AttemptResult(Outcome.SUCCEEDED, 0, None, "done")
FAILED = AttemptResult(Outcome.FAILED, 3, "exit code 3", "oops")
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _store(path: Path) -> tuple[SqliteStore, list[Claim]]:
    """Five running jobs (the same on every call): claims of generation 1."""
    clock = FakeClock(NOW)
    store = SqliteStore(path, clock)
    spec = JobSpec(("true",), clock.now(), 1000, max_attempts=1)  # no jittered retry time
    store.insert([spec for _ in range(5)])
    claims = store.claim_due(OWNER, 5, 30)
    assert len(claims) == 5
    clock.advance(1)
    return store, claims


def _batch(claims: list[Claim]) -> tuple[list[tuple[int, int, AttemptResult]], list[ProcessRecord]]:
    """A mixed batch: successes with and without a riding record, a failure with one, a
    stale record (its job's finish is at the right generation), and a stale finish."""
    a, b, c, d, e = claims
    records = [
        ProcessRecord(a.job.id, a.generation, 101, 11, "/l/a"),
        ProcessRecord(c.job.id, c.generation, 103, 13, "/l/c"),  # a failure's
        ProcessRecord(d.job.id, d.generation + 1, 104, 14, "/l/d"),  # stale record
        ProcessRecord(e.job.id, e.generation, 105, 15, "/l/e"),  # current; its finish is not
    ]
    items = [
        (a.job.id, a.generation, OK),
        (b.job.id, b.generation, OK),  # no record rides: what was recorded stays
        (c.job.id, c.generation, FAILED),
        (d.job.id, d.generation, OK),
        (e.job.id, e.generation + 1, OK),
    ]
    return items, records


def _rows(store: SqliteStore) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    def read(conn: sqlite3.Connection) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        attempts = conn.execute("SELECT * FROM attempts ORDER BY job_id, number").fetchall()
        cur = conn.execute("SELECT * FROM jobs ORDER BY id")
        keep = [i for i, d in enumerate(cur.description) if d[0] != "key"]  # random per store
        jobs = [tuple(r[i] for i in keep) for r in cur.fetchall()]
        return [tuple(r) for r in attempts], jobs

    return store.db.write(read)


def test_riding_records_land_as_records_then_finishes(tmp_path: Path) -> None:
    """Every row and every answer equal to writing the records, then the finishes."""
    plain, claims = _store(tmp_path / "plain.db")
    riding, same = _store(tmp_path / "riding.db")
    try:
        assert [c.job.id for c in claims] == [c.job.id for c in same]
        b = claims[1]
        for store in (plain, riding):  # b's command ran long enough to be recorded alone
            assert store.record_processes([ProcessRecord(b.job.id, 1, 102, 12, "/l/b")]) == []
        items, records = _batch(claims)
        lost = plain.record_processes(records)
        assert lost == [claims[3].job.id]  # e's record is current: only its finish is stale
        expected = plain.finish_many(items)
        got = riding.submit_finish_riding(items, records).result()
        assert [repr(x) for x in got] == [repr(x) for x in expected]
        assert _rows(riding) == _rows(plain)
        attempts = {r[0]: r for r in _rows(riding)[0]}
        assert 101 in attempts[claims[0].job.id] and 102 in attempts[b.job.id]
        assert 103 in attempts[claims[2].job.id]  # a failure's record: written first
        assert 104 not in attempts[claims[3].job.id] and 105 in attempts[claims[4].job.id]
    finally:
        plain.close()
        riding.close()


def test_a_quick_commands_record_and_success_are_one_write_of_its_attempt(
    tmp_path: Path,
) -> None:
    """Through the executor's path (AsyncStore.finish with the record): one op, and the
    attempt's row updated by one statement that writes both the pid and the end."""
    store, claims = _store(tmp_path / "one.db")
    aio = AsyncStore(store, threads=2)
    seen: list[str] = []
    try:
        store.db.write(lambda conn: conn.set_trace_callback(seen.append))

        async def finish_all() -> None:
            await asyncio.gather(
                *(
                    aio.finish(
                        c.job.id,
                        c.generation,
                        OK,
                        ProcessRecord(c.job.id, c.generation, 200 + i, 7, f"/l/{i}"),
                    )
                    for i, c in enumerate(claims)
                )
            )

        before = aio.finishes.batches
        asyncio.run(finish_all())
        assert aio.finishes.batches == before + 1
        assert sum(1 for s in seen if s.lstrip().startswith("UPDATE attempts")) == 1
        attempts = _rows(store)[0]
        assert [(r[0], "succeeded") for r in attempts] == [(c.job.id, "succeeded") for c in claims]
        for i, c in enumerate(claims):
            [row] = [r for r in attempts if r[0] == c.job.id]
            assert 200 + i in row and f"/l/{i}" in row
    finally:
        store.db.write(lambda conn: conn.set_trace_callback(None))
        aio.close()
        store.close()
