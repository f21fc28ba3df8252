"""The job id mark (migration 0010): seeded from the jobs there are, raised by every insert."""

from __future__ import annotations

import re
from pathlib import Path

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobSpec
from jobctl.store.migrate import migrate
from jobctl.store.queries import queries
from jobctl.store.sqlite import SqliteStore
from tests.old_schema import connect_at

SRC = Path(__file__).parents[2] / "src" / "jobctl"


def test_the_mark_starts_at_the_highest_existing_id(tmp_path: Path, clock: FakeClock) -> None:
    db = tmp_path / "j.db"
    conn = connect_at(db, 8)
    conn.execute(
        "INSERT INTO jobs (id, key, fingerprint, queue, command, env, cwd, owner_uid, priority,"
        " max_attempts, backoff_base_ms, backoff_cap_ms, created_at, run_at, status)"
        " VALUES (9, 'k', '', 'default', '[\"true\"]', '[]', '/', 0, 0, 3, 0, 0, 1, 2,"
        " 'scheduled')"
    )
    migrate(conn)
    assert conn.execute("SELECT seq FROM job_id_high").fetchone()[0] == 9
    conn.execute("DELETE FROM jobs")
    conn.close()
    store = SqliteStore(db, clock)
    try:
        [ins] = store.insert([JobSpec(("true",), clock.now(), 1)])
        assert ins.job.id == 10
    finally:
        store.close()


def test_job_rows_are_inserted_in_one_place_which_raises_the_mark() -> None:
    """A second way in that forgot the mark could hand out a deleted job's id again."""
    inserting = [n for n, sql in queries().items() if re.search(r"INSERT\s+INTO\s+jobs\b", sql)]
    assert inserting == ["insert_job_row"]
    users = [
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if '"insert_job_row"' in path.read_text()
    ]
    # SQLite: store/inserts.py, which raises the mark. PostgreSQL: its own inserts take
    # ids from a sequence, which never goes back (nextval is not rolled back either).
    assert sorted(users) == ["store/inserts.py", "store/pg/inserts.py"]
    pg = (SRC / "store" / "pg" / "inserts.py").read_text()
    assert 'db.q("next_job_ids")' in pg
    body = (SRC / "store" / "inserts.py").read_text().split("def _write(")[1].split("\ndef ")[0]
    assert 'q("insert_job_row")' in body and 'q("raise_job_id_high")' in body
