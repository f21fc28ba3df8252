"""The jobs row is declared once (jobctl.store.jobrow): the encoders, the insert
statement, the materializer and the decoder all follow the one column list."""

from __future__ import annotations

import dataclasses
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import Backoff, Job, JobSpec, JobTemplate
from jobctl.domain.resources import Resources
from jobctl.store import claims, jobrow
from jobctl.store.materialize import RowMaker
from jobctl.store.queries import queries
from jobctl.store.rows import to_ms
from jobctl.store.sqlite import SqliteStore

T0 = datetime(2030, 1, 1, tzinfo=UTC)
SPEC = JobSpec(
    command=("echo", "x"),
    run_at=T0 + timedelta(seconds=5),
    owner_uid=1000,
    key="k-1",
    queue="q",
    priority=3,
    max_attempts=4,
    timeout=1.5,
    backoff=Backoff(1, 9),
    env=(("A", "1"),),
    cwd="/tmp",
    schedule_id="sch-1",
    scheduled_for=T0,
    retry_on=(3, 4),
    no_retry_on=(1,),
    resources=Resources(nice=5, memory_max=1 << 20, cpu_quota=50.0),
    on_failure="mail -s failed me < /dev/null",
)


def test_every_insert_column_is_a_jobs_column_and_the_statement_names_them_in_order(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "c.db", FakeClock(T0))
    try:
        table = store.db.read(lambda c: [r[1] for r in c.execute("PRAGMA table_info(jobs)")])
    finally:
        store.close()
    assert set(jobrow.INSERT_COLUMNS) <= set(table)
    assert len(set(jobrow.INSERT_COLUMNS)) == len(jobrow.INSERT_COLUMNS)
    sql = queries()["insert_job_row"]
    assert f"({', '.join(jobrow.INSERT_COLUMNS)}, status)" in sql
    assert sql.count("?") == len(jobrow.INSERT_COLUMNS)
    assert jobrow.TAIL_COLUMNS[jobrow.QUEUE] == "queue"
    assert jobrow.TAIL_COLUMNS[jobrow.OWNER] == "owner_uid"
    assert jobrow.TAIL_COLUMNS[jobrow.DUE] == "due"
    assert set(jobrow.FINGERPRINT_COLUMNS) <= set(jobrow.TAIL_COLUMNS)


def test_each_encoded_value_is_what_its_column_holds(tmp_path: Path) -> None:
    """row_tail's values, named by TAIL_COLUMNS, equal the stored row's columns (an
    encoder out of step with its column tuple fails here), and decode back to the spec."""
    store = SqliteStore(tmp_path / "e.db", FakeClock(T0))
    try:
        [ins] = store.insert([SPEC])
        row = store.db.read(lambda c: c.execute("SELECT * FROM jobs").fetchone())
    finally:
        store.close()
    tail = jobrow.row_tail(SPEC, to_ms(T0))
    assert dict(zip(jobrow.TAIL_COLUMNS, tail, strict=True)) == {
        c: row[c] for c in jobrow.TAIL_COLUMNS
    }
    assert jobrow.job_from_row(row) == ins.job
    assert jobrow.job_from_row(row).spec == SPEC.__class__(**{**_fields(SPEC), "key": "k-1"})


def test_a_claimed_row_decodes_to_the_job_init_gives(tmp_path: Path) -> None:
    """job_from_row stores a Job slot by slot (issue 17, domain/slotted.py): the object
    is the one ``Job(...)`` builds from the same values, type and hash included, with the
    lease, generation and attempt of the claim."""
    clock = FakeClock(T0)
    store = SqliteStore(tmp_path / "c.db", clock)
    try:
        store.insert([SPEC])
        clock.advance(10)  # due
        [claim] = store.claim_due("h:1:t", 1, 30)
        row = store.db.read(lambda c: c.execute("SELECT * FROM jobs").fetchone())
    finally:
        store.close()
    got = jobrow.job_from_row(row)
    built = Job(**{f.name: getattr(got, f.name) for f in dataclasses.fields(Job)})
    assert got == built and type(got) is Job and hash(got) == hash(built)
    assert got == claim.job and got.lease_owner == "h:1:t" and got.generation == 1
    assert got.run_at == got.spec.run_at and got.lease_until == claim.lease_until
    same = ("id", "key", "attempt", "failures", "generation", "lease_owner", "last_error",
            "dead_reason", "notified")  # fmt: skip
    assert {c: getattr(got, c) for c in same} == {c: row[c] for c in same}
    assert got.status.value == row["status"] == "running" and (got.attempt, got.failures) == (1, 0)


def test_the_materializer_builds_the_same_row_from_the_same_parts() -> None:
    template = JobTemplate(
        command=("echo", "x"), queue="q", priority=3, retry_on=(3,), resources=Resources(nice=2)
    )
    maker = RowMaker(template, 1000)
    key, fp, tail = maker.item("sch-1", maker.fingerprint("sch-1"), T0, T0, to_ms(T0))
    spec = template.to_spec(T0, key, 1000, "sch-1", T0)
    assert (fp, tail) == (spec.fingerprint(), jobrow.row_tail(spec, to_ms(T0)))
    n = len(jobrow.TEMPLATE_COLUMNS)
    assert tail[:n] == jobrow.template_values(template, 1000, jobrow.TextMemo())


def _fields(spec: JobSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in JobSpec.__dataclass_fields__}


def test_claimed_rows_decode_the_same_through_dicts(tmp_path: Path) -> None:
    """Issue 17's fast path (the claim's rows as dicts, their column names read once:
    ``claims.row_dicts``) gives exactly the claims that decoding ``sqlite3.Row`` gives."""
    clock = FakeClock(T0 + timedelta(seconds=10))
    store = SqliteStore(tmp_path / "d.db", clock)
    try:
        other = JobSpec(("true",), T0, 1000, queue="q", env=(("B", "2"),), cwd="/")
        store.insert([SPEC, other, replace(SPEC, key="k-2")])
        found, limits = store.submit_claim_rows("h:1:t", 10, 30).result()
        rows = store.db.read(lambda c: c.execute("SELECT * FROM jobs ORDER BY id").fetchall())
    finally:
        store.close()
    assert len(found) == 3 and isinstance(rows[0], sqlite3.Row)
    assert claims.row_dicts(rows) == [dict(r) for r in rows]
    assert claims.as_dicts(rows) == [dict(r) for r in rows] and claims.as_dicts(found) is found
    by_row = claims.claims_from_rows(sorted(rows, key=lambda r: (r["sort_key"], r["id"])), limits)
    assert claims.claims_in_order(found, limits) == by_row
    assert claims.claims_in_order(rows, limits) == by_row


def test_a_spec_is_decoded_from_spec_columns_only_and_shared_by_equal_rows(
    tmp_path: Path,
) -> None:
    """Issue 17: the rows of one read share a decoded spec (with each its own key) when
    their SPEC_COLUMNS are equal, so the spec decoder may read no other column but the
    key (a new JobSpec field decoded from a column left out of SPEC_COLUMNS would give
    one job another's value)."""
    store = SqliteStore(tmp_path / "s.db", FakeClock(T0))
    try:
        store.insert([replace(SPEC, key=None), replace(SPEC, key=None), SPEC])
        rows = store.db.read(lambda c: c.execute("SELECT * FROM jobs ORDER BY id").fetchall())
    finally:
        store.close()
    read: set[str] = set()

    class Recording(dict[str, Any]):
        def __getitem__(self, name: str) -> Any:
            read.add(name)
            return super().__getitem__(name)

    jobrow._spec_from_row(Recording(dict(rows[2])), jobrow.RowMemo())
    assert read == {*jobrow.SPEC_COLUMNS, "key"}
    memo = jobrow.RowMemo()
    a, b, c = (jobrow.job_from_row(r, memo=memo) for r in rows)
    assert a.spec.key != b.spec.key and c.spec.key == "k-1"
    assert a.spec.command is b.spec.command  # decoded once
    assert [a, b, c] == [jobrow.job_from_row(r) for r in rows]
    assert [replace(a.spec, key=None), replace(b.spec, key=None)] == [replace(SPEC, key=None)] * 2
