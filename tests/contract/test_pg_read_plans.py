"""PostgreSQL only: the reads of ``status``, ``schedules list`` and ``schedules show``, and
the timer's wake-up reads, are bounded whatever the planner knows (issue 18 on PostgreSQL).

A table that was never analyzed (autovacuum off, or a bulk import it has not caught up
with) leaves the planner guessing a few hundred rows. It then computed ``min()`` by reading
every due job or schedule cursor, sorted every schedule of the owner for a page of 50, and
ANDed every job of the owner into a schedule's history: at 100,000 schedules and jobs,
0.15 s a status call and 0.3-1.1 s a page (bench/bench_schedules.py --db). These plans
are read with ``EXPLAIN`` on tables that have rows and no statistics, as right after an
import.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobTemplate
from jobctl.domain.schedule import Misfire, Overlap, Policy, ScheduleSpec, Timing
from tests.contract.conftest import PG_DSN, pg_schema

pytestmark = pytest.mark.postgres
T0 = datetime(2030, 1, 1, tzinfo=UTC)
OWNER = 1000
N = 3000


@pytest.fixture(scope="module")
def store() -> Iterator[Any]:
    """N schedules and their N due jobs, materialized; no table analyzed."""
    from jobctl.store.pg.store import PostgresStore

    clock = FakeClock(T0)
    for schema in pg_schema():
        s = PostgresStore(PG_DSN, clock, random.Random(3), schema=schema, pool_size=2)
        try:
            policy = Policy(Misfire.ONCE, 100, Overlap.ALLOW)
            template = JobTemplate(("true",), max_attempts=1, queue="plans")
            spec = ScheduleSpec(Timing("UTC", every=60, anchor=T0), policy, template, OWNER)
            for _ in range(0, N, 1000):
                s.create_schedules([spec] * 1000)
            clock.set(T0 + timedelta(minutes=1, seconds=1))
            while s.materialize(1000).schedules:
                pass
            yield s
        finally:
            s.close()


def _plan(store: Any, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of the plan ``name`` runs under, as the store runs it."""
    from jobctl.store.pg.schedconn import PgSchedConn

    def read(conn: Any) -> Any:
        PgSchedConn(store.db, conn).plan_for(name)
        row = conn.execute("EXPLAIN (FORMAT JSON) " + store.db.q(name), params).fetchone()
        return next(iter(row.values()))

    nodes, todo = [], [store.db.read(read)[0]["Plan"]]
    while todo:
        node = todo.pop()
        nodes.append(node)
        todo += node.get("Plans", [])
    return nodes


def _types(nodes: list[dict[str, Any]]) -> set[str]:
    return {n["Node Type"] for n in nodes}


def _first_id(store: Any) -> str:
    return str(store.list_schedules(False, 1, None, OWNER)[0].id)


@pytest.mark.parametrize(
    "name",
    ["list_schedules", "list_schedules_after", "list_schedules_of", "list_schedules_of_after"],
)
def test_a_schedule_page_reads_the_index_in_order(store: Any, name: str) -> None:
    params = {"deleted": False, "limit": 51, "after": _first_id(store), "owner": OWNER}
    types = _types(_plan(store, name, params))
    assert "Sort" not in types and "Gather" not in types and "Gather Merge" not in types, types
    assert "Limit" in types


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("oldest_due", {"queue": "plans", "now": 2**62}),
        ("oldest_future_due", {"queue": "plans", "now": 2**62}),
        ("next_schedule_run", {}),
        ("count_future_due", {"now": 2**62, "cap": 10_000}),
        ("next_future", {}),
        ("next_lease_expiry", {"spare": None}),
    ],
)
def test_status_reads_stop_at_a_bounded_number_of_rows(
    store: Any, name: str, params: dict[str, Any]
) -> None:
    """Each of these reads the first rows of an index and stops (a Limit in the plan),
    never an aggregate over every matching row."""
    assert "Limit" in _types(_plan(store, name, params))


def test_a_schedules_history_does_not_read_every_job_of_its_owner(store: Any) -> None:
    params = {"id": _first_id(store), "owner": OWNER, "limit": 10}
    indexes = {n.get("Index Name") for n in _plan(store, "schedule_jobs", params)}
    assert "jobs_schedule" in indexes and "jobs_owner_key" not in indexes, indexes


def test_the_page_settings_end_with_their_transaction(store: Any) -> None:
    """A page's planner settings must not leak into the pooled connection's next use."""
    store.list_schedules(False, 10, None, OWNER)
    shown = store.db.read(lambda conn: conn.execute("SHOW enable_sort").fetchone())
    assert next(iter(shown.values())) == "on"


def test_reads_together_share_one_transaction(store: Any) -> None:
    """``status``'s reads run in one transaction (``Store.together``): one BEGIN and
    COMMIT for the dozen of them; reads outside it keep a transaction each."""

    def xid() -> int:
        row = store.db.read(lambda conn: conn.execute("SELECT pg_current_xact_id()").fetchone())
        return int(str(next(iter(row.values()))))

    inside = store.together(lambda: (xid(), store.stats(), store.schedule_totals(), xid()))
    assert inside[0] == inside[3]
    assert xid() != xid()
    assert store.together(lambda: store.together(xid)) > 0  # nested: the outer one
