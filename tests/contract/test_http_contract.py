"""Webhook jobs in the store, on every backend (issue 16): an http job's request is kept
and read back, its fingerprint covers the request, an accepted finish records the
attempt's status, latency and body hash, a fenced one records nothing, and Retry-After
holds the retry back. Also: the PostgreSQL schema has the SQLite columns."""

from __future__ import annotations

import random
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.http import HttpRequest
from jobctl.domain.models import AttemptResult, Backoff, JobSpec
from jobctl.domain.states import JobStatus, Outcome
from jobctl.errors import JobctlError, KeyConflict
from jobctl.store.base import Store
from jobctl.store.sqlite import SqliteStore
from tests.contract.conftest import PG_DSN, pg_schema

W = "worker"
REQ = HttpRequest("POST", "https://hooks.example/x", (("X-A", "1"),), '{"a": 1}', (409,), "s1")


def _spec(clock: FakeClock, req: HttpRequest = REQ, **kw: object) -> JobSpec:
    return JobSpec(command=(), http=req, run_at=clock.now(), owner_uid=1000, **kw)  # type: ignore[arg-type]


def test_an_http_job_round_trips_and_its_key_covers_the_request(
    store: Store, clock: FakeClock
) -> None:
    [ins] = store.insert([_spec(clock, key="k")])
    got = store.get(ins.job.id)
    assert got.spec.http == REQ and got.spec.command == ()
    [again] = store.insert([_spec(clock, key="k")])
    assert not again.created and again.job.id == ins.job.id
    other = HttpRequest("POST", "https://hooks.example/y")
    with pytest.raises(KeyConflict):
        store.insert([_spec(clock, other, key="k")])


def test_an_accepted_finish_records_the_call_a_fenced_one_nothing(
    store: Store, clock: FakeClock
) -> None:
    store.insert([_spec(clock), _spec(clock)])
    a, b = store.claim_due(W, 2, 30)
    ok = AttemptResult(Outcome.SUCCEEDED, http_status=204, latency_ms=12, body_sha256="ab" * 32)
    store.cancel(b.job.id, "stop")  # b's finish is then fenced
    out = store.finish_many([(a.job.id, a.generation, ok), (b.job.id, b.generation, ok)])
    assert not isinstance(out[0], JobctlError) and isinstance(out[1], JobctlError)
    [first] = store.get(a.job.id).attempts
    assert (first.http_status, first.latency_ms, first.body_sha256) == (204, 12, "ab" * 32)
    [fenced] = store.get(b.job.id).attempts
    assert fenced.http_status is None and fenced.body_sha256 is None


def test_retry_after_holds_the_retry_back(store: Store, clock: FakeClock) -> None:
    store.insert([_spec(clock, backoff=Backoff(0.001, 0.001))])
    [c] = store.claim_due(W, 1, 30)
    busy = AttemptResult(Outcome.FAILED, None, "HTTP 429", retry_after=90.0, http_status=429,
                         latency_ms=3, body_sha256="cd" * 32)  # fmt: skip
    store.finish_many([(c.job.id, c.generation, busy)])
    job = store.get(c.job.id)
    assert job.status is JobStatus.SCHEDULED
    assert job.run_at >= clock.now() + timedelta(seconds=90)
    assert job.attempts[0].http_status == 429


def _sqlite_columns(store: SqliteStore, table: str) -> set[str]:
    def read(conn: sqlite3.Connection) -> set[str]:
        return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}

    return store.db.read(read)


def test_postgres_has_the_sqlite_columns(tmp_path: Path, clock: FakeClock) -> None:
    sqlite = SqliteStore(tmp_path / "cols.db", clock, random.Random(1))
    tables = ("jobs", "attempts", "webhook_secrets")
    lite = {t: _sqlite_columns(sqlite, t) for t in tables}
    sqlite.close()
    import psycopg

    from jobctl.store.pg.store import PostgresStore

    for schema in pg_schema():
        PostgresStore(PG_DSN, clock, random.Random(1), schema=schema, pool_size=1).close()
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            for t in tables:
                rows = conn.execute(
                    "SELECT column_name FROM information_schema.columns"
                    " WHERE table_schema = %s AND table_name = %s",
                    (schema, t),
                ).fetchall()
                assert {r[0] for r in rows} == lite[t], t
