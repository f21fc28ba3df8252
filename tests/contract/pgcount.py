"""A PostgreSQL store in a schema of its own, and a count of the queries it asks for:
for the PostgreSQL-only tests that check round trips (test_pg_inserts, test_pg_audit)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from jobctl.domain.clock import FakeClock
from tests.contract.conftest import PG_DSN, pg_schema

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def pg_store() -> Iterator[Any]:
    """One store on a fresh schema (a fixture's body: ``yield from pg_store()``)."""
    from jobctl.store.pg.store import PostgresStore

    for schema in pg_schema():
        s = PostgresStore(PG_DSN, FakeClock(T0), random.Random(3), schema=schema, pool_size=2)
        try:
            yield s
        finally:
            s.close()


def count_queries(store: Any) -> Counter[str]:
    """Counts of the named queries ``store`` asks for from now on."""
    counts: Counter[str] = Counter()
    real = store.db.q

    def q(name: str) -> str:
        counts[name] += 1
        return str(real(name))

    store.db.q = q
    return counts
