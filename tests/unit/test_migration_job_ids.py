"""Migration 0009 rebuilds `jobs` with AUTOINCREMENT and loses nothing it had."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from jobctl.store.migrate import migrate, migrations
from jobctl.store.sqlite import connect

_JOB = (
    "INSERT INTO jobs (id, key, fingerprint, queue, command, env, cwd, owner_uid, priority,"
    " max_attempts, backoff_base_ms, backoff_cap_ms, created_at, run_at, status, due,"
    " attempt, generation, lease_owner, lease_until, sort_key, schedule_id, retry_on)"
    " VALUES (?, ?, '', 'default', '[\"true\"]', '[]', '/', 0, 0, 3, 0, 0, 1, 2, ?, ?, ?, ?,"
    " ?, ?, 7, 'sch-1', '[75]')"
)


def _at_version_8(path: Path) -> sqlite3.Connection:
    conn = connect(str(path))
    conn.execute(
        "CREATE TABLE schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    for m in migrations()[:8]:
        conn.executescript(m.sql)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 'x')", (m.version, m.name))
    conn.execute(_JOB, (3, "a", "scheduled", 1, 0, 0, None, None))
    conn.execute(_JOB, (9, "b", "running", 0, 1, 1, "w", 99))
    conn.execute(
        "INSERT INTO attempts (job_id, number, generation, lease_owner, started_at)"
        " VALUES (9, 1, 1, 'w', 5)"
    )
    conn.execute(
        "INSERT INTO job_counts VALUES ('default', 0, 'due', 1), ('default', 0, 'running', 1)"
    )
    return conn


def _schema_of_jobs(conn: sqlite3.Connection) -> list[tuple[str, str, str | None]]:
    found = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE tbl_name = 'jobs' AND type != 'table'"
        " ORDER BY name"
    )
    return [tuple(r) for r in found]


def _everything(conn: sqlite3.Connection, table: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2")]


def test_the_rebuilt_table_keeps_rows_columns_indexes_triggers(tmp_path: Path) -> None:
    conn = _at_version_8(tmp_path / "j.db")
    before = {t: _everything(conn, t) for t in ("jobs", "attempts", "job_counts")}
    columns = conn.execute("PRAGMA table_xinfo(jobs)").fetchall()
    schema = _schema_of_jobs(conn)
    assert migrate(conn) == len(migrations())
    assert {t: _everything(conn, t) for t in before} == before  # nothing cascaded away
    assert [tuple(c) for c in conn.execute("PRAGMA table_xinfo(jobs)")] == [
        tuple(c) for c in columns
    ]
    assert _schema_of_jobs(conn) == schema  # incl. sqlite_autoindex_jobs_1, word for word
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    [fk] = conn.execute("PRAGMA foreign_key_list(attempts)").fetchall()
    assert (fk["table"], fk["on_delete"]) == ("jobs", "CASCADE")
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1  # back on
    assert (
        "AUTOINCREMENT"
        in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'jobs'").fetchone()[0]
    )
    assert conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'").fetchone()[0] == 9


def test_the_lifecycle_trigger_still_guards_the_rebuilt_table(tmp_path: Path) -> None:
    conn = _at_version_8(tmp_path / "t.db")
    migrate(conn)
    try:
        conn.execute("UPDATE jobs SET status = 'succeeded', finished_at = 1 WHERE id = 3")
    except sqlite3.IntegrityError as exc:
        assert "illegal job transition" in str(exc)
    else:
        raise AssertionError("scheduled -> succeeded was allowed")
    conn.execute("DELETE FROM jobs WHERE id = 9")  # cascades again, counts follow
    assert conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == 0
    assert conn.execute("SELECT n FROM job_counts WHERE bucket = 'running'").fetchone()[0] == 0
