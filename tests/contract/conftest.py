"""The store contract suite runs once per backend; add a backend to BACKENDS.

Each backend says which parts of the contract it implements; a test (or module) that
needs a part names it with ``@pytest.mark.store_parts(...)`` and runs on the backends
that have it (the others are not parametrized, not skipped).

PostgreSQL: each test gets a schema of its own in the database of
``JOBCTL_TEST_POSTGRES`` (default: the local server, user postgres): a migrated one the
process made for an earlier test, put back as its migrations left it
(tests/contract/pgschemas.py), or a new one; all dropped at the end of the session.
Without a server or psycopg the PostgreSQL tests skip, unless ``JOBCTL_REQUIRE_POSTGRES=1``
(CI sets it), which turns that skip into a failure.
"""

from __future__ import annotations

import functools
import os
import random
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.store.base import Store
from jobctl.store.sqlite import SqliteStore
from tests.conftest import T0, migrated
from tests.contract.pgschemas import Schemas, reused

PG_DSN = os.environ.get("JOBCTL_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
REQUIRE_PG = os.environ.get("JOBCTL_REQUIRE_POSTGRES") == "1"
ALL_PARTS = frozenset({"jobs", "schedules"})


@dataclass(frozen=True)
class Backend:
    #: Opens the store for one test; what it yields is closed and cleaned up after it.
    open: Callable[[Path, FakeClock], Iterator[Store]]
    parts: frozenset[str]


def _sqlite(tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    store = SqliteStore(tmp_path / "contract.db", clock, random.Random(7))
    yield store
    store.close()


def no_postgres(why: str) -> NoReturn:
    if REQUIRE_PG:
        pytest.fail(f"JOBCTL_REQUIRE_POSTGRES=1 but {why}")
    pytest.skip(why)


def pg_schema() -> Iterator[str]:
    """A fresh schema in the test database, dropped afterwards."""
    schema = "jobctl_t_" + secrets.token_hex(6)
    yield from _pg_made("SCHEMA", schema, f"DROP SCHEMA {schema} CASCADE")


def pg_database(prefix: str) -> Iterator[str]:
    """A fresh database named ``prefix`` and hex digits on the test server (for daemons,
    which take a URL), dropped afterwards; its name."""
    name = prefix + secrets.token_hex(4)
    yield from _pg_made("DATABASE", name, f"DROP DATABASE {name} WITH (FORCE)")


def pg_store_schema(t0: datetime) -> Iterator[tuple[Any, str]]:
    """A ``PostgresStore`` (its clock at ``t0``) on a schema of its own, and that schema's
    name, for the tests that play a second daemon's transactions beside it
    (:func:`second_conn`); a fixture yields from it."""
    from jobctl.store.pg.store import PostgresStore

    for schema in pg_schema():
        store = PostgresStore(PG_DSN, FakeClock(t0), random.Random(5), schema=schema, pool_size=4)
        try:
            yield store, schema
        finally:
            store.close()


def second_conn(schema: str, lock_timeout_ms: int) -> Any:
    """A connection of its own (a second daemon's) in ``schema``, rows as dicts, whose
    lock waits end after ``lock_timeout_ms`` (a deadlock test then fails, never hangs)."""
    import psycopg
    from psycopg import sql
    from psycopg.rows import dict_row

    conn = psycopg.connect(PG_DSN, row_factory=dict_row)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    conn.execute(f"SET lock_timeout = {lock_timeout_ms}")
    conn.commit()
    return conn


def _pg_made(kind: str, name: str, drop: str) -> Iterator[str]:
    try:
        import psycopg
    except ImportError:
        no_postgres("psycopg is not installed (extra 'postgres')")
    try:
        with psycopg.connect(PG_DSN, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"CREATE {kind} {name}")
    except psycopg.OperationalError as exc:
        no_postgres(f"no PostgreSQL at {PG_DSN}: {exc}")
    try:
        yield name
    finally:
        with psycopg.connect(PG_DSN, autocommit=True, connect_timeout=5) as conn:
            conn.execute(drop)


def _postgres(tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    from jobctl.store.pg.store import PostgresStore

    for schema in reused(_schemas()):
        store = PostgresStore(PG_DSN, clock, random.Random(7), schema=schema, pool_size=4)
        try:
            yield store
        finally:
            store.close()


@functools.cache
def _schemas() -> Schemas:
    """This process's migrated schemas (tests/contract/pgschemas.py); the first call
    checks that there is a server (a skip, or a failure under REQUIRE_PG)."""
    for _ in pg_schema():  # a server to reach, or a skip (a failure under REQUIRE_PG)
        pass

    def migrate(schema: str) -> None:
        from jobctl.store.pg.store import PostgresStore

        PostgresStore(PG_DSN, FakeClock(T0), schema=schema, pool_size=1).close()

    return Schemas(PG_DSN, migrate)


@pytest.fixture(scope="session", autouse=True)
def _drop_reused_schemas() -> Iterator[None]:
    yield
    if _schemas.cache_info().currsize:
        _schemas().drop_all()


BACKENDS: dict[str, Backend] = {
    "sqlite": Backend(_sqlite, ALL_PARTS),
    "postgres": Backend(_postgres, ALL_PARTS),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    needed = {"jobs"}
    for marker in metafunc.definition.iter_markers("store_parts"):
        needed |= set(marker.args)
    names = [name for name in sorted(BACKENDS) if needed <= BACKENDS[name].parts]
    metafunc.parametrize("backend", names)


@pytest.fixture
def store(backend: str, tmp_path: Path, clock: FakeClock, sqlite_template: Path) -> Iterator[Store]:
    if backend == "sqlite":  # what _sqlite opens: a copy of the migrated template
        migrated(sqlite_template, tmp_path / "contract.db")
    yield from BACKENDS[backend].open(tmp_path, clock)
