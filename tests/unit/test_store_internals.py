"""Named queries and migrations: the SQL files themselves."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from jobctl.store.migrate import migrate, migrations
from jobctl.store.queries import parse_queries, queries
from jobctl.store.sqlite import connect
from tests.old_schema import connect_at


def test_queries_parse_and_are_valid_sql(tmp_path: Path) -> None:
    conn = connect(str(tmp_path / "q.db"))
    migrate(conn)
    for sql in queries().values():
        params = [None] * sql.count("?") if "?" in sql else dict.fromkeys(_params(sql))
        conn.execute(f"EXPLAIN {sql}", params)  # parses, binds


def _params(sql: str) -> set[str]:
    import re

    return set(re.findall(r":(\w+)", sql))


def test_duplicate_query_names_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;")


def test_migrations_are_numbered_and_idempotent(tmp_path: Path) -> None:
    found = migrations()
    assert [m.version for m in found] == list(range(1, len(found) + 1))
    conn = connect(str(tmp_path / "m.db"))
    assert migrate(conn) == len(found)
    assert migrate(conn) == len(found)
    rows = conn.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()
    assert [r[0] for r in rows] == [m.version for m in found]


def test_schema_equals_sum_of_migrations(tmp_path: Path) -> None:
    """Applying the files by hand gives exactly the schema migrate() builds."""
    a = connect(str(tmp_path / "a.db"))
    migrate(a)
    b = sqlite3.connect(tmp_path / "b.db")
    for m in migrations():
        b.executescript(m.sql)
    schema = (
        "SELECT type, name, sql FROM sqlite_master WHERE name != 'schema_migrations' ORDER BY name"
    )
    assert [tuple(r) for r in a.execute(schema)] == b.execute(schema).fetchall()


SCHEMA_DOC = Path(__file__).resolve().parents[2] / "docs" / "schema.md"


@pytest.mark.parametrize("start", [0, 1, 8, 16])
def test_a_migrated_database_matches_the_checked_in_schema(tmp_path: Path, start: int) -> None:
    """docs/schema.md is the expected schema (generated once, reviewed, checked in); a
    database migrated from nothing, or upgraded from an old version, must introspect
    (sqlite-utils: columns, types, defaults, keys, indexes, triggers, views, CREATE
    text) to exactly that.  A new migration without a regenerated file fails here, and
    so does an upgrade path that builds something else than a fresh database."""
    from jobctl.store.export import render_schema

    path = tmp_path / "m.db"
    conn = connect_at(path, start) if start else connect(str(path))
    migrate(conn)
    expected = SCHEMA_DOC.read_text(encoding="utf-8")
    assert render_schema(conn) == expected, "run `python -m jobctl.cli.docgen` and review"


def test_the_schema_check_can_fail(tmp_path: Path) -> None:
    from jobctl.store.export import render_schema

    conn = connect(str(tmp_path / "m.db"))
    migrate(conn)
    conn.execute("ALTER TABLE jobs ADD COLUMN unmigrated TEXT")
    assert render_schema(conn) != SCHEMA_DOC.read_text(encoding="utf-8")


def test_newer_database_is_refused(tmp_path: Path) -> None:
    from jobctl.errors import StoreError

    conn = connect(str(tmp_path / "n.db"))
    migrate(conn)
    conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', 'now')")
    with pytest.raises(StoreError, match="newer"):
        migrate(conn)


def test_due_index_is_used_by_claim(tmp_path: Path) -> None:
    conn = connect(str(tmp_path / "plan.db"))
    migrate(conn)
    sql = queries()["claim_lane"]
    plan = " ".join(
        r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", dict.fromkeys(_params(sql)))
    )
    # walks the due index in (priority, run_at) order and stops at LIMIT: no sort, no scan
    assert "USING INDEX jobs_due" in plan and "TEMP B-TREE" not in plan
    sql = queries()["promote_due"]
    plan = " ".join(
        r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", dict.fromkeys(_params(sql)))
    )
    assert "jobs_future" in plan


def test_schedule_pages_seek_the_listing_index(tmp_path: Path) -> None:
    conn = connect(str(tmp_path / "p.db"))
    migrate(conn)
    for name in ("list_schedules", "list_schedules_after"):
        params = {"deleted": False, "limit": 10, "after": "sch-x", "owner": None}
        plan = " ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {queries()[name]}", params))
        assert "schedules_created" in plan and "TEMP B-TREE" not in plan, plan
    after = queries()["list_schedules_after"]
    steps = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {after}", params)]
    # The view `schedules` is flattened: its definitions table `d` is read through the
    # index, each row's cursor `c` by primary key.
    assert steps[0].startswith("SEARCH d USING INDEX schedules_created"), steps
    assert all("SCAN" not in step for step in steps), steps


def test_materializer_reads_due_cursors_through_their_index(tmp_path: Path) -> None:
    conn = connect(str(tmp_path / "p.db"))
    migrate(conn)
    sql = queries()["materialize_due"]
    plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", {"now": 0, "limit": 10})]
    assert plan[0].startswith("SEARCH c USING INDEX schedule_cursors_due"), plan
    assert all("SCAN" not in step and "TEMP B-TREE" not in step for step in plan), plan


def test_migration_8_keeps_every_schedule_column(tmp_path: Path) -> None:
    """Splitting cursors from definitions (0008) loses nothing a reader saw before."""
    conn = connect_at(tmp_path / "s.db", 7)
    conn.executescript(
        """
        INSERT INTO schedules (id, name, cron, tz, template, owner_uid, misfire,
            catch_up_limit, overlap, jitter_ms, paused, deleted_at, created_at, next_run_at,
            waiting, last_job_id, misfire_skips, overlap_skips, pause_skips, last_skip_at,
            last_skip_reason, last_skip_nominal)
        VALUES ('sch-1', 'one', '0 * * * *', 'UTC', '{}', 7, 'once', 100, 'queue', 0,
                1, NULL, 10, 3600000, 1800000, 42, 1, 2, 3, 20, 'overlap', 1800000),
               ('sch-2', NULL, '5 * * * *', 'UTC', '{}', 7, 'all', 5, 'skip', 500,
                0, 99, 11, 7200000, NULL, NULL, 0, 0, 0, NULL, NULL, NULL);
        INSERT INTO schedule_skips (schedule_id, reason, first_nominal, last_nominal, count,
            recorded_at) VALUES ('sch-1', 'overlap', 1, 2, 2, 3);
        """
    )
    before = [tuple(r) for r in conn.execute("SELECT * FROM schedules ORDER BY id")]
    columns = [d[0] for d in conn.execute("SELECT * FROM schedules").description]
    assert migrate(conn) == len(migrations())
    listed = ", ".join(columns)  # later migrations add columns (0013: broken_at, …)
    after = [tuple(r) for r in conn.execute(f"SELECT {listed} FROM schedules ORDER BY id")]
    assert after == before
    now = [d[0] for d in conn.execute("SELECT * FROM schedules").description]
    assert now[: len(columns)] == columns
    broken = conn.execute("SELECT broken_at, broken_reason FROM schedules").fetchall()
    assert [tuple(r) for r in broken] == [(None, None)] * 2  # 0013: nothing starts broken
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    [fk] = conn.execute("PRAGMA foreign_key_list(schedule_skips)").fetchall()
    assert fk["table"] == "schedule_defs"


def test_migration_9_keeps_jobs_and_attempts_and_scopes_keys_per_owner(tmp_path: Path) -> None:
    """Rebuilding jobs (0009) keeps every row and attempt; a key is unique per owner only."""
    conn = connect_at(tmp_path / "k.db", 8)
    conn.executescript(
        """
        PRAGMA foreign_keys=ON;
        INSERT INTO jobs (id, key, fingerprint, queue, command, env, cwd, owner_uid, priority,
            max_attempts, backoff_base_ms, backoff_cap_ms, created_at, run_at, status,
            finished_at, dead_reason, sort_key)
        VALUES (1, 'k', 'f', 'q', '["true"]', '[]', '/', 1001, 0, 1, 0, 0, 5, 6, 'dead',
                7, 'max_attempts', 6);
        INSERT INTO attempts (job_id, number, generation, lease_owner, started_at, finished_at,
            outcome) VALUES (1, 1, 1, 'o', 6, 7, 'failed');
        """
    )
    jobs = [tuple(r) for r in conn.execute("SELECT * FROM jobs")]
    attempts = [tuple(r) for r in conn.execute("SELECT * FROM attempts")]
    cols = ", ".join(d[0] for d in conn.execute("SELECT * FROM attempts").description)
    job_cols = ", ".join(d[0] for d in conn.execute("SELECT * FROM jobs").description)
    assert migrate(conn) == len(migrations())
    # later migrations add columns (0017: log_bytes; 0019: jobs.resources)
    assert [tuple(r) for r in conn.execute(f"SELECT {job_cols} FROM jobs")] == jobs
    assert [tuple(r) for r in conn.execute(f"SELECT {cols} FROM attempts")] == attempts
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    [fk] = conn.execute("PRAGMA foreign_key_list(attempts)").fetchall()
    assert fk["table"] == "jobs"
    conn.execute(
        "INSERT INTO jobs (id, key, fingerprint, queue, command, env, cwd, owner_uid, priority,"
        " max_attempts, backoff_base_ms, backoff_cap_ms, created_at, run_at, status)"
        " VALUES (2, 'k', 'f', 'q', '[]', '[]', '/', 1002, 0, 1, 0, 0, 5, 6, 'scheduled')"
    )
    with pytest.raises(sqlite3.IntegrityError, match=r"jobs\.owner_uid, jobs\.key"):
        conn.execute(
            "INSERT INTO jobs (id, key, fingerprint, queue, command, env, cwd, owner_uid,"
            " priority, max_attempts, backoff_base_ms, backoff_cap_ms, created_at, run_at,"
            " status) VALUES (3, 'k', 'f', 'q', '[]', '[]', '/', 1002, 0, 1, 0, 0, 5, 6,"
            " 'scheduled')"
        )
    conn.execute("DELETE FROM jobs WHERE id = 1")  # the cascade still reaches attempts
    assert conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == 0


@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("jobs_by_keys", "jobs_owner_key"),
        ("schedule_jobs", "jobs_owner_key"),
        ("schedule_by_name", "schedule_defs_name"),
        ("schedule_by_name_any", "schedule_defs_name"),
        ("list_dead", "jobs_dead"),
        ("dead_ids", "jobs_dead"),
        ("list_jobs_by_status", "jobs_status"),
    ],
)
def test_owner_scoped_lookups_seek_an_index(tmp_path: Path, name: str, index: str) -> None:
    """Keys and names per owner (0009) and the owner filters keep every lookup a seek."""
    conn = connect(str(tmp_path / "o.db"))
    migrate(conn)
    sql = queries()[name]
    plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", dict.fromkeys(_params(sql)))]
    # The lookup seeks the index (for a name: in the subquery that finds the live row)
    assert any(step.startswith("SEARCH") and index in step for step in plan), plan
    assert all(not step.startswith("SCAN") for step in plan), plan


def _commit_levels(conn: sqlite3.Connection) -> list[int]:
    """migrate(conn), recording the ``synchronous`` level each of its COMMITs ran at."""
    levels: list[int] = []
    level = [int(conn.execute("PRAGMA synchronous").fetchone()[0])]

    def trace(stmt: str) -> None:
        if stmt.strip().upper() == "COMMIT":
            levels.append(level[0])
        elif stmt.upper().startswith("PRAGMA SYNCHRONOUS="):
            level[0] = _LEVELS[stmt.split("=", 1)[1].strip().upper()]

    conn.set_trace_callback(trace)
    try:
        migrate(conn)
    finally:
        conn.set_trace_callback(None)
    return levels


_LEVELS = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3, "0": 0, "1": 1, "2": 2, "3": 3}


def test_a_fresh_database_waits_for_the_disk_once_not_per_migration(tmp_path: Path) -> None:
    """In WAL mode every migration but the last commits with synchronous=NORMAL; the last
    one's FULL commit flushes the WAL and with it all of them (one fsync where a fresh
    database, i.e. every daemon's first start and every test store, took 23)."""
    conn = connect(str(tmp_path / "wal.db"))  # WAL, synchronous=FULL
    levels = _commit_levels(conn)
    assert len(levels) == len(migrations())
    assert levels[:-1] == [1] * (len(levels) - 1)
    assert levels[-1] == 2
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # restored


def test_a_rollback_journal_keeps_its_synchronous_level(tmp_path: Path) -> None:
    """NORMAL is not crash-safe with a rollback journal: there nothing is lowered."""
    conn = sqlite3.connect(str(tmp_path / "delete.db"), isolation_level=None)
    conn.execute("PRAGMA synchronous=FULL")
    assert set(_commit_levels(conn)) == {2}
