"""The lifecycle in code and the trigger in the schema must agree pair by pair."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import pytest

from jobctl.domain.states import TRANSITIONS, JobStatus, Outcome, check_transition
from jobctl.errors import IllegalTransition
from jobctl.store.migrate import migrate
from jobctl.store.sqlite import connect

PAIRS = [(a, b) for a, b in itertools.product(JobStatus, JobStatus) if a != b]


def _row_in(conn: sqlite3.Connection, status: JobStatus) -> int:
    """Insert a job row satisfying every CHECK for ``status``; returns its id."""
    running = status is JobStatus.RUNNING
    final = status in (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)
    cur = conn.execute(
        "INSERT INTO jobs (key, fingerprint, queue, command, env, cwd, owner_uid, priority,"
        " max_attempts, backoff_base_ms, backoff_cap_ms, created_at, run_at, status,"
        " lease_owner, lease_until, finished_at, dead_reason)"
        " VALUES (?, 'f', 'q', '[\"true\"]', '[]', '/', 0, 0, 1, 0, 0, 0, 0, ?, ?, ?, ?, ?)",
        (
            f"k{status}{id(conn)}{conn.total_changes}",
            status.value,
            "o" if running else None,
            1 if running else None,
            1 if final else None,
            "max_attempts" if status is JobStatus.DEAD else None,
        ),
    )
    assert cur.lastrowid is not None
    return cur.lastrowid


def _fields_for(status: JobStatus) -> tuple[str | None, int | None, int | None, str | None]:
    running = status is JobStatus.RUNNING
    final = status in (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)
    return (
        "o" if running else None,
        1 if running else None,
        1 if final else None,
        "max_attempts" if status is JobStatus.DEAD else None,
    )


@pytest.fixture(scope="module")
def conn(tmp_path_factory: pytest.TempPathFactory) -> sqlite3.Connection:
    c = connect(str(Path(tmp_path_factory.mktemp("states")) / "s.db"))
    migrate(c)
    return c


@pytest.mark.parametrize(("old", "new"), PAIRS, ids=[f"{a}>{b}" for a, b in PAIRS])
def test_schema_trigger_matches_transition_table(
    conn: sqlite3.Connection, old: JobStatus, new: JobStatus
) -> None:
    job_id = _row_in(conn, old)
    owner, until, finished, reason = _fields_for(new)
    allowed_in_code = (old, new) in TRANSITIONS
    try:
        conn.execute(
            "UPDATE jobs SET status = ?, lease_owner = ?, lease_until = ?, finished_at = ?,"
            " dead_reason = ? WHERE id = ?",
            (new.value, owner, until, finished, reason, job_id),
        )
        allowed_in_sql = True
    except sqlite3.IntegrityError as exc:
        assert "illegal job transition" in str(exc)
        allowed_in_sql = False
    assert allowed_in_sql == allowed_in_code


def test_check_transition_names_job_and_states() -> None:
    check_transition(1, JobStatus.SCHEDULED, JobStatus.RUNNING, "claim")
    with pytest.raises(IllegalTransition, match="job 7: cannot claim a job that is succeeded"):
        check_transition(7, JobStatus.SUCCEEDED, JobStatus.RUNNING, "claim")
    with pytest.raises(IllegalTransition):
        check_transition(7, JobStatus.SCHEDULED, JobStatus.RUNNING, "finish")


def test_final_states_have_no_way_out_but_dead_replay() -> None:
    sources = {old for old, _ in TRANSITIONS}
    assert JobStatus.SUCCEEDED not in sources and JobStatus.CANCELLED not in sources
    assert {new for old, new in TRANSITIONS if old is JobStatus.DEAD} == {JobStatus.SCHEDULED}


def test_only_job_caused_outcomes_use_budget() -> None:
    assert {o for o in Outcome if o.uses_budget} == {
        Outcome.FAILED,
        Outcome.TIMEOUT,
        Outcome.LEASE_EXPIRED,
    }


def test_docs_diagram_lists_every_transition() -> None:
    text = (Path(__file__).parents[2] / "docs" / "states.md").read_text()
    for old, new in TRANSITIONS:
        assert f"{old.value} --> {new.value}" in text, f"docs/states.md misses {old}->{new}"
