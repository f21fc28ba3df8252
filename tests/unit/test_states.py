"""The lifecycle in code and the trigger in the schema must agree pair by pair."""

from __future__ import annotations

import itertools
import re
import sqlite3
from pathlib import Path

import pytest

from jobctl.domain.states import (
    DEAD_REASONS,
    TRANSITIONS,
    DeadReason,
    JobStatus,
    Op,
    Outcome,
    StopReason,
    check_transition,
)
from jobctl.errors import IllegalTransition
from jobctl.store.migrate import migrate
from jobctl.store.sqlite import connect

PAIRS = [(a, b) for a, b in itertools.product(JobStatus, JobStatus) if a != b]


def _row_in(conn: sqlite3.Connection, status: JobStatus) -> int:
    """Insert a job row satisfying every CHECK for ``status``; returns its id."""
    running = status is JobStatus.RUNNING
    final = status.is_finished
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
    final = status.is_finished
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
    check_transition(1, JobStatus.SCHEDULED, JobStatus.RUNNING, Op.CLAIM)
    with pytest.raises(IllegalTransition, match="job 7: cannot claim a job that is succeeded"):
        check_transition(7, JobStatus.SUCCEEDED, JobStatus.RUNNING, Op.CLAIM)
    # what a user who typed `jobctl cancel` on a finished job reads: what cancel takes,
    # not the refused target state ("(to cancelled)")
    with pytest.raises(IllegalTransition) as refused:
        check_transition(1, JobStatus.SUCCEEDED, JobStatus.CANCELLED, Op.CANCEL)
    assert str(refused.value) == (
        "job 1: cannot cancel a job that is succeeded (cancel takes a job that is scheduled "
        "or running)"
    )
    with pytest.raises(IllegalTransition):
        check_transition(7, JobStatus.SCHEDULED, JobStatus.RUNNING, Op.FINISH)


def test_check_transition_checks_the_dead_reason_of_each_operation() -> None:
    running, dead = JobStatus.RUNNING, JobStatus.DEAD
    check_transition(1, running, dead, Op.FINISH, DeadReason.NON_RETRYABLE)
    check_transition(1, running, dead, Op.RECLAIM, DeadReason.POISON)
    with pytest.raises(IllegalTransition, match="reclaim cannot make a job dead for reason"):
        check_transition(1, running, dead, Op.RECLAIM, DeadReason.MAX_ATTEMPTS)
    with pytest.raises(IllegalTransition, match="for reason None"):
        check_transition(1, running, dead, Op.FINISH)
    with pytest.raises(IllegalTransition, match="for reason poison"):
        check_transition(1, running, JobStatus.SCHEDULED, Op.RECLAIM, DeadReason.POISON)


def test_every_dead_reason_has_an_operation_and_only_moves_to_dead_have_reasons() -> None:
    given = [reason for reasons in DEAD_REASONS.values() for reason in reasons]
    assert sorted(given) == sorted(DeadReason)  # each once, none missing
    for op in DEAD_REASONS:
        assert op in TRANSITIONS[(JobStatus.RUNNING, JobStatus.DEAD)]


def test_every_operation_makes_some_move() -> None:
    assert set().union(*TRANSITIONS.values()) == set(Op)


def test_each_stop_reason_maps_to_one_outcome() -> None:
    assert {r: r.outcome for r in StopReason} == {
        StopReason.TIMEOUT: Outcome.TIMEOUT,
        StopReason.SHUTDOWN: Outcome.INTERRUPTED,
        StopReason.CANCEL: Outcome.CANCELLED,
        StopReason.LEASE_LOST: Outcome.CANCELLED,
        StopReason.CUT_OFF: Outcome.INTERRUPTED,
    }
    assert all(r.text for r in StopReason)


def test_final_means_no_way_out_and_finished_means_final_or_dead() -> None:
    sources = {old for old, _ in TRANSITIONS}
    assert {s for s in JobStatus if s.is_final} == set(JobStatus) - sources
    assert {s for s in JobStatus if s.is_finished} == {
        s for s in JobStatus if s.is_final or s is JobStatus.DEAD
    }


def test_finished_matches_the_schema_check_on_finished_at(conn: sqlite3.Connection) -> None:
    for status in JobStatus:
        job_id = _row_in(conn, status)
        with pytest.raises(sqlite3.IntegrityError):  # finished_at flipped: refused by CHECK
            conn.execute(
                "UPDATE jobs SET finished_at = ? WHERE id = ?",
                (None if status.is_finished else 1, job_id),
            )


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


DOCS = Path(__file__).parents[2] / "docs" / "states.md"
ARROW = re.compile(r"^\s*(\S+) --> (\S+?)(?:: (.*))?$")
LABEL = re.compile(r"^(\w+)(?: \(([^)]*)\))?$")


def _diagram() -> tuple[dict[tuple[str, str], dict[str, str]], set[str], set[str]]:
    """The docs diagram: (from, to) -> {operation: bracketed note}, entered and final states."""
    block = DOCS.read_text().split("```mermaid", 1)[1].split("```", 1)[0]
    moves: dict[tuple[str, str], dict[str, str]] = {}
    entered, final = set(), set()
    for line in block.splitlines():
        found = ARROW.match(line)
        if found is None:
            continue
        old, new, label = found.groups()
        if old == "[*]":
            entered.add(new)
        elif new == "[*]":
            final.add(old)
        else:
            labels = [LABEL.match(part.strip()) for part in (label or "").split(" / ")]
            assert all(labels), f"docs/states.md: cannot read the label of {line.strip()!r}"
            moves[(old, new)] = {m.group(1): m.group(2) or "" for m in labels if m}
    return moves, entered, final


def test_docs_diagram_has_exactly_the_moves_and_operations_of_the_code() -> None:
    moves, _, _ = _diagram()
    in_code = {(a.value, b.value): {op.value for op in ops} for (a, b), ops in TRANSITIONS.items()}
    in_docs = {pair: set(ops) for pair, ops in moves.items()}
    assert in_docs == in_code


def test_docs_diagram_gives_each_operation_its_dead_reasons() -> None:
    moves, _, _ = _diagram()
    to_dead = moves[(JobStatus.RUNNING.value, JobStatus.DEAD.value)]
    in_docs = {op: {r.strip() for r in note.split(",")} for op, note in to_dead.items()}
    in_code = {op.value: {r.value for r in reasons} for op, reasons in DEAD_REASONS.items()}
    assert in_docs == in_code


def test_docs_diagram_marks_exactly_the_final_states() -> None:
    _, entered, final = _diagram()
    assert entered == {JobStatus.SCHEDULED.value}  # enqueue
    assert final == {s.value for s in JobStatus if s.is_final}


def test_docs_dead_reason_table_matches_the_code() -> None:
    section = DOCS.read_text().split("## Dead reasons", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \|", section, re.MULTILINE)
    in_code = {(r.value, op.value) for op, reasons in DEAD_REASONS.items() for r in reasons}
    assert set(rows) == in_code and len(rows) == len(in_code)
