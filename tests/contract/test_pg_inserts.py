"""PostgreSQL only: concurrent keyless enqueues share one id fetch and one ``COPY``.

Single-job requests from concurrent clients reach the store as many one-job groups of
one write; inserting them group by group cost a savepoint, an id fetch and a ``COPY``
each, about five round trips per job (issue 15's benchmark). What each group is answered
is the store contract's (tests/contract/test_insert_contract.py); this checks the trips.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jobctl.domain.models import JobSpec
from jobctl.errors import InvalidInput
from tests.contract.pgcount import T0, count_queries, pg_store

pytestmark = pytest.mark.postgres


@pytest.fixture
def store() -> Iterator[Any]:
    yield from pg_store()


def _job(key: str | None = None) -> JobSpec:
    return JobSpec(("true",), T0, 1000, key=key)


def test_keyless_groups_of_one_write_fetch_ids_and_insert_once(store: Any) -> None:
    asked = count_queries(store)
    out = store.submit_insert_groups([[_job()] for _ in range(8)]).result()
    assert all(o[0].created for o in out)
    assert asked["next_job_ids"] == 1 and asked["insert_job_values"] == 1
    assert asked["insert_job_row"] == 0  # COPY cannot be pipelined with its savepoint
    jobs = [store.get(o[0].job.id) for o in out]
    assert [j.key for j in jobs] == [o[0].job.key for o in out]  # answered as stored
    assert len({j.id for j in jobs}) == 8


def test_a_large_keyless_batch_still_goes_by_copy(store: Any) -> None:
    from jobctl.store.pg.inserts import PIPELINED_MAX

    asked = count_queries(store)
    (out,) = store.submit_insert_groups([[_job() for _ in range(PIPELINED_MAX + 1)]]).result()
    assert len(out) == PIPELINED_MAX + 1 and all(i.created for i in out)
    assert asked["insert_job_row"] == 1


def test_a_refused_group_sends_the_write_group_by_group(store: Any) -> None:
    bad = _job()
    object.__setattr__(bad, "max_attempts", 2**70)
    asked = count_queries(store)
    out = store.submit_insert_groups([[_job()], [bad], [_job()]]).result()
    assert isinstance(out[1], InvalidInput) and out[0][0].created and out[2][0].created
    # pipelined (refused: nothing committed), together in a savepoint (refused), then
    # each group alone
    assert asked["next_job_ids"] == 1 + 1 + 3


def test_groups_with_keys_go_group_by_group(store: Any) -> None:
    asked = count_queries(store)
    out = store.submit_insert_groups([[_job("a")], [_job()], [_job("a")]]).result()
    assert out[0][0].job.id == out[2][0].job.id and not out[2][0].created
    assert asked["next_job_ids"] == 3


def test_keyless_groups_over_the_queued_quota_are_refused_in_the_same_two_trips(
    store: Any,
) -> None:
    from jobctl.domain.quota import Limits
    from jobctl.errors import QuotaExceeded

    store.quota = lambda uid: Limits(queued=3)
    store.insert([_job()])
    asked = count_queries(store)
    out = store.submit_insert_groups([[_job()], [_job(), _job()], [_job()], [_job()]]).result()
    assert out[0][0].created and out[2][0].created  # 1 stored + 1 + 1 = 3, the quota
    assert isinstance(out[1], QuotaExceeded) and isinstance(out[3], QuotaExceeded)
    assert asked["next_job_ids"] == 1 and asked["insert_job_values"] == 1
    assert asked["owner_counts"] == 1
    (again,) = store.submit_insert_groups([[_job()]]).result()
    assert isinstance(again, QuotaExceeded) and again.details["used"] == 3  # none leaked in
