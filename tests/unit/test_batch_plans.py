"""The executor's batched statements look jobs and attempts up by key, never by a scan.

``succeed_jobs`` joins a JSON batch to ``jobs``; without care the planner prefers the
``jobs_status`` index and walks every running job for each batch.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobctl.store.migrate import migrate
from jobctl.store.queries import queries
from jobctl.store.sqlite import connect


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
    ],
)
def test_batched_statements_use_the_keys(tmp_path: Path, name: str, lookup: str) -> None:
    plan = _plan(tmp_path, name)
    assert lookup in plan
    assert "jobs_status" not in plan and "SCAN jobs" not in plan and "SCAN attempts" not in plan
