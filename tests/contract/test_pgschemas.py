"""The reused PostgreSQL schemas of the contract suite (tests/contract/pgschemas.py): a
schema handed to the next test is what a fresh migration makes, or it is not handed on."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.store.pg.store import PostgresStore
from tests.conftest import T0
from tests.contract.conftest import PG_DSN, pg_schema
from tests.contract.pgschemas import Schemas
from tests.contract.raw import raw_write
from tests.contract.test_store_contract import spec

pytestmark = pytest.mark.postgres


@pytest.fixture
def schemas() -> Iterator[Schemas]:
    for _ in pg_schema():  # a server, or a skip (a failure under JOBCTL_REQUIRE_POSTGRES=1)
        pass

    def migrate(schema: str) -> None:
        PostgresStore(PG_DSN, FakeClock(T0), schema=schema, pool_size=1).close()

    made = Schemas(PG_DSN, migrate)
    yield made
    made.drop_all()


def _open(schema: str) -> PostgresStore:
    return PostgresStore(PG_DSN, FakeClock(T0), random.Random(7), schema=schema, pool_size=2)


def _used(store: PostgresStore) -> int:
    """Insert two jobs (rows in jobs and job_counts, the id sequence used) and a migration
    row of a later version; the first job's id."""
    clock = FakeClock(T0)
    ins, _ = store.insert([spec(clock, key="k"), spec(clock, key="k2")])
    raw_write(store, "INSERT INTO schema_migrations (version, name) VALUES (999, 'later')")
    return ins.job.id


def test_a_schema_given_back_is_as_fresh_as_a_new_one(schemas: Schemas) -> None:
    fresh = schemas.take()
    store = _open(fresh)
    first = _used(store)
    store.close()
    schemas.give_back(fresh)

    again = schemas.take()
    assert again == fresh  # reused, not made again
    store = _open(again)  # the migration row 999 was removed, or this would refuse
    try:
        assert store.list_jobs(None, None, 10, None) == []
        assert store.stats() == []  # job_counts emptied too
        assert _used(store) == first  # job ids start again where a new schema's do
    finally:
        store.close()
        schemas.give_back(again)


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE jobs ADD COLUMN extra INTEGER",
        "CREATE INDEX jobs_extra ON jobs (queue, id)",
        "DROP TRIGGER jobs_transition ON jobs",
        "CREATE FUNCTION one() RETURNS integer LANGUAGE sql AS 'SELECT 1'",
        "ALTER SEQUENCE jobs_id_seq INCREMENT BY 2",
        "ALTER TABLE queues ALTER COLUMN paused DROP NOT NULL",
    ],
)
def test_a_schema_whose_definitions_changed_is_dropped_not_handed_on(
    schemas: Schemas, change: str
) -> None:
    fresh = schemas.take()
    store = _open(fresh)
    raw_write(store, change)
    store.close()
    schemas.give_back(fresh)

    other = schemas.take()
    assert other != fresh
    from tests.contract.pgschemas import _FINGERPRINT

    left = schemas._sql("SELECT count(*) FROM pg_namespace WHERE nspname = %(ns)s", {"ns": fresh})
    assert left == [(0,)]
    assert schemas._sql(_FINGERPRINT, {"ns": other})[0][0] is not None
    schemas.give_back(other)
