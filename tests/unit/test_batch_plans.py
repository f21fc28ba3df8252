"""The executor's batched statements look jobs and attempts up by key, never by a scan.

``succeed_jobs`` joins a JSON batch to ``jobs``; without care the planner prefers the
``jobs_status`` index and walks every running job for each batch.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobSpec, ProcessRecord
from jobctl.store.finishing import record_processes_tx
from jobctl.store.migrate import migrate
from jobctl.store.queries import queries
from jobctl.store.sqlite import SqliteStore, connect


def _plan(tmp_path: Path, name: str) -> str:
    conn = connect(str(tmp_path / "plan.db"))
    migrate(conn)
    sql = queries()[name]
    params = dict.fromkeys(re.findall(r":(\w+)", sql))
    plan = " | ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    conn.close()
    return plan


@pytest.mark.parametrize(
    ("name", "lookup"),
    [
        ("succeed_jobs", "SEARCH jobs USING INTEGER PRIMARY KEY"),
        ("succeed_attempts", "SEARCH attempts USING PRIMARY KEY (job_id=?)"),
        ("finish_states", "SEARCH jobs USING INTEGER PRIMARY KEY"),
        ("record_processes", "SEARCH attempts USING PRIMARY KEY (job_id=?)"),
    ],
)
def test_batched_statements_use_the_keys(tmp_path: Path, name: str, lookup: str) -> None:
    plan = _plan(tmp_path, name)
    assert lookup in plan
    assert "jobs_status" not in plan and "SCAN jobs" not in plan and "SCAN attempts" not in plan


def test_a_batch_of_pid_records_is_one_statement(tmp_path: Path) -> None:
    """Issue 17: the records of a batch (each quick command's rides with its finish) are
    written by one statement, not one per record; each record's fence still holds."""
    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    store = SqliteStore(tmp_path / "r.db", clock)
    try:
        store.insert([JobSpec(("true",), clock.now(), 1000) for _ in range(3)])
        a, b, c = store.claim_due("h:1:t", 3, 30)
        records = [ProcessRecord(x.job.id, x.generation, 100 + i, 7, f"/l/{i}")
                   for i, x in enumerate((a, b, c))]  # fmt: skip
        records[2] = dataclasses.replace(records[2], generation=c.generation + 1)  # stale
        seen: list[str] = []

        def tx(conn: sqlite3.Connection) -> list[int]:
            conn.set_trace_callback(seen.append)
            try:
                return record_processes_tx(conn, records)
            finally:
                conn.set_trace_callback(None)

        assert store.db.write(tx) == [c.job.id]
        assert sum(1 for s in seen if "UPDATE attempts" in s) == 1
        pids = {r.job_id: r.pid for r in store.running()}
        assert pids == {a.job.id: 100, b.job.id: 101, c.job.id: None}
    finally:
        store.close()
