"""The reads of issue 18 stay bounded: their query plans are pinned here.

Every list is a keyset page (a seek, then at most LIMIT rows in index order: no scan of
the table, no sort), and status reads counters (a row per owner or lane), so their cost
does not grow with the schedules or jobs stored. Migration 0018 fills the schedule
counters from the rows already there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobctl.store.migrate import migrate, migrations
from jobctl.store.queries import queries
from jobctl.store.sqlite import connect
from tests.old_schema import connect_at


def _plan(tmp_path: Path, name: str) -> list[str]:
    conn = connect(str(tmp_path / "plan.db"))
    migrate(conn)
    sql = queries()[name]
    params = dict.fromkeys(re.findall(r":(\w+)", sql))
    plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    conn.close()
    return plan


@pytest.mark.parametrize(
    ("name", "seek"),
    [
        ("list_jobs", "SEARCH jobs USING INTEGER PRIMARY KEY (rowid<?)"),
        ("list_jobs_by_status", "SEARCH jobs USING INDEX jobs_status (status=? AND id<?)"),
        ("list_jobs_by_queue", "SEARCH jobs USING INDEX jobs_queue (queue=? AND id<?)"),
        ("list_jobs_by_status_queue", "SEARCH jobs USING INDEX jobs_queue (queue=? AND id<?)"),
        ("list_dead", "SEARCH jobs USING INDEX jobs_dead (finished_at>? AND finished_at<?)"),
        ("attempts_page", "SEARCH attempts USING PRIMARY KEY (job_id=? AND number>?)"),
        ("list_audit", "SEARCH audit USING INTEGER PRIMARY KEY (rowid<?)"),
        ("list_audit_by_uid", "SEARCH audit USING INDEX audit_uid (uid=? AND id<?)"),
        ("list_schedules", "SCAN d USING INDEX schedules_created"),
        ("list_schedules_after", "SEARCH d USING INDEX schedules_created (created_at>?)"),
        ("list_schedules_of", "SEARCH d USING INDEX schedule_defs_owner (owner_uid=?)"),
        (
            "list_schedules_of_after",
            "SEARCH d USING INDEX schedule_defs_owner (owner_uid=? AND created_at>?)",
        ),
    ],
)
def test_every_page_is_a_seek_in_index_order(tmp_path: Path, name: str, seek: str) -> None:
    plan = _plan(tmp_path, name)
    assert plan[0] == seek, plan
    # the rest: lookups by key only (a schedule's cursor row, the keyset's own row)
    assert all("TEMP B-TREE" not in step for step in plan), plan
    assert all(not step.startswith("SCAN") for step in plan[1:]), plan


@pytest.mark.parametrize(
    ("name", "reads"),
    [
        ("schedule_totals", ["SCAN schedule_counts"]),  # a row per owner
        (
            "owner_schedules",
            [
                "SCAN CONSTANT ROW",
                "SCALAR SUBQUERY 1",
                "SEARCH schedule_counts USING INTEGER PRIMARY KEY (rowid=?)",
            ],
        ),
        ("next_schedule_run", ["SEARCH schedule_cursors USING INDEX schedule_cursors_due"]),
    ],
)
def test_status_reads_counters_not_schedules(tmp_path: Path, name: str, reads: list[str]) -> None:
    assert _plan(tmp_path, name) == reads


def test_late_due_count_is_capped(tmp_path: Path) -> None:
    """Due jobs the timer has not promoted are counted through jobs_future, at most :cap."""
    plan = " | ".join(_plan(tmp_path, "count_future_due"))
    assert "SEARCH jobs USING INDEX jobs_future (run_at<?)" in plan, plan
    assert "LIMIT" in queries()["count_future_due"] and ":cap" in queries()["count_future_due"]


def test_migration_18_counts_the_schedules_already_stored(tmp_path: Path) -> None:
    conn = connect_at(tmp_path / "c.db", 17)
    conn.executescript(
        """
        INSERT INTO schedule_defs (id, name, cron, tz, template, owner_uid, misfire,
            catch_up_limit, overlap, jitter_ms, created_at, misfire_skips, overlap_skips,
            pause_skips)
        VALUES ('sch-1', NULL, '0 * * * *', 'UTC', '{}', 7, 'once', 100, 'skip', 0, 1, 1, 2, 3),
               ('sch-2', NULL, '0 * * * *', 'UTC', '{}', 7, 'once', 100, 'skip', 0, 2, 10, 0, 0),
               ('sch-3', NULL, '0 * * * *', 'UTC', '{}', 7, 'once', 100, 'skip', 0, 3, 5, 5, 5),
               ('sch-4', NULL, '0 * * * *', 'UTC', '{}', 8, 'once', 100, 'skip', 0, 4, 0, 0, 0);
        INSERT INTO schedule_cursors (id, paused, deleted_at, next_run_at, broken_at)
        VALUES ('sch-1', 1, NULL, 0, NULL), ('sch-2', 0, NULL, 0, 5),
               ('sch-3', 0, 9, 0, NULL), ('sch-4', 0, NULL, 0, NULL);
        """
    )
    assert migrate(conn) == len(migrations())
    got = [tuple(r) for r in conn.execute("SELECT * FROM schedule_counts ORDER BY owner_uid")]
    # owner 7: sch-3 is deleted (not counted); sch-1 paused; sch-2 broken
    assert got == [(7, 2, 1, 1, 11, 2, 3), (8, 1, 0, 0, 0, 0, 0)]
    recount = [tuple(r) for r in conn.execute(queries()["recount_schedule_totals"])]
    assert recount == got
