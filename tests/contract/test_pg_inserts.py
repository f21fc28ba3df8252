"""PostgreSQL only: concurrent keyless enqueues share one ``INSERT``.

Single-job requests from concurrent clients reach the store as many one-job groups of
one write; inserting them group by group cost a savepoint, an id fetch and a ``COPY``
each, about five round trips per job (issue 15's benchmark). The group commit sends them
as one ``INSERT`` that takes its own ids and checks its own refusals (``insert_keyless``);
the checked way, when that fails, reads first and inserts after. What each group is
answered is the store contract's (tests/contract/test_insert_contract.py); this checks
the statements.
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


def test_keyless_groups_of_one_write_are_one_insert_that_takes_its_own_ids(store: Any) -> None:
    asked = count_queries(store)
    out = store.submit_insert_groups([[_job()] for _ in range(8)]).result()
    assert all(o[0].created for o in out)
    assert asked["insert_keyless"] == 1
    assert asked["next_job_ids"] == 0 and asked["insert_job_values"] == 0  # no reads first
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
    # the group commit's one INSERT (refused: nothing committed), the checked way's reads
    # and INSERT in a savepoint (refused), then each group alone
    assert asked["insert_keyless"] == 1
    assert asked["next_job_ids"] == 1 and asked["next_job_ids_text"] == 3


def test_groups_with_keys_go_group_by_group(store: Any) -> None:
    asked = count_queries(store)
    out = store.submit_insert_groups([[_job("a")], [_job()], [_job("a")]]).result()
    assert out[0][0].job.id == out[2][0].job.id and not out[2][0].created
    assert asked["next_job_ids_text"] == 3  # the ids of a group as one row of text


def test_keyless_groups_over_the_queued_quota_are_refused_by_the_checked_ways_two_trips(
    store: Any,
) -> None:
    """The one ``INSERT`` cannot say which groups pass the quota: it refuses itself, and
    the checked way's reads and ``INSERT`` answer each group."""
    from jobctl.domain.quota import Limits
    from jobctl.errors import QuotaExceeded

    store.quota = lambda uid: Limits(queued=3)
    store.insert([_job()])
    asked = count_queries(store)
    out = store.submit_insert_groups([[_job()], [_job(), _job()], [_job()], [_job()]]).result()
    assert out[0][0].created and out[2][0].created  # 1 stored + 1 + 1 = 3, the quota
    assert isinstance(out[1], QuotaExceeded) and isinstance(out[3], QuotaExceeded)
    assert asked["insert_keyless"] == 1  # refused itself
    assert asked["next_job_ids"] == 1 and asked["insert_job_values"] == 1
    assert asked["owner_counts"] == 1
    (again,) = store.submit_insert_groups([[_job()]]).result()
    assert isinstance(again, QuotaExceeded) and again.details["used"] == 3  # none leaked in


def test_keyless_groups_within_the_queued_quota_need_no_reads(store: Any) -> None:
    from jobctl.domain.quota import Limits

    store.quota = lambda uid: Limits(queued=4)
    store.insert([_job()])
    asked = count_queries(store)
    out = store.submit_insert_groups([[_job()], [_job(), _job()]]).result()
    assert all(i.created for o in out for i in o)  # 1 stored + 3 = 4, the quota
    assert asked["insert_keyless"] == 1 and asked["owner_counts"] == 0
    asked.clear()
    (over,) = store.submit_insert_groups([[_job()]]).result()
    assert over.details["used"] == 4  # refused (by the checked way)
    assert asked["insert_keyless"] == 1 and asked["owner_counts"] == 1


def test_a_job_for_a_worker_queue_is_refused_by_the_checked_way(store: Any) -> None:
    from jobctl.domain.workers import payload_text
    from jobctl.errors import Conflict

    work = payload_text({"task": "m:f"})
    store.insert([JobSpec((), T0, 1000, queue="work", payload=work)])  # marks "work"
    asked = count_queries(store)
    out = store.submit_insert_groups([[_job()], [JobSpec(("true",), T0, 1000, queue="work")]])
    first, second = out.result()
    assert first[0].created and isinstance(second, Conflict)
    assert asked["insert_keyless"] == 1 and asked["worker_queues"] == 1


def test_numbered_rows_repeat_the_row_and_number_every_placeholder() -> None:
    from jobctl.store.pg.inserts import numbered_rows

    text = "WITH a AS (SELECT %s) INSERT INTO t (x, y)\nVALUES (%s, f(%s))\nRETURNING x"
    assert numbered_rows(text, 2) == (
        "WITH a AS (SELECT $1) INSERT INTO t (x, y) VALUES ($2, f($3)), ($4, f($5)) RETURNING x"
    )


def test_the_one_insert_runs_on_a_generic_plan(store: Any) -> None:
    """psycopg prepares a statement after a few runs; PostgreSQL then plans it anew on
    every run (a custom plan) unless its generic plan looks as cheap, and the planning
    cost the server more than the ``INSERT`` (the quota's count read per owner, as a
    subquery, made the generic plan look ten times dearer)."""
    from jobctl.domain.quota import Limits

    store.quota = lambda uid: Limits(queued=1000)
    for _ in range(40):
        store.submit_insert_groups([[_job()], [_job()]]).result()
    generic = custom = 0
    first, second = store.db.commit_pools  # the committers' connections: every write's
    with first.connection() as one, second.connection() as two:
        for conn in (one, two):
            for p in conn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE %s",
                ("%INSERT INTO jobs%",),
            ):
                generic, custom = generic + p["generic_plans"], custom + p["custom_plans"]
    assert generic > custom  # custom: the first five runs on each connection


def test_the_one_insert_counts_each_owner_against_its_own_quota(store: Any) -> None:
    from jobctl.domain.quota import Limits
    from jobctl.errors import QuotaExceeded

    store.quota = lambda uid: Limits(queued=2 if uid == 1000 else 5)
    store.insert([_job()])  # owner 1000: 1 of 2
    other = JobSpec(("true",), T0, 2000)
    asked = count_queries(store)
    fits = store.submit_insert_groups([[_job()], [other], [other], [other]]).result()
    assert all(i.created for o in fits for i in o)  # 2 of 2, and 3 of 5: one INSERT
    assert asked["insert_keyless"] == 1 and asked["owner_counts"] == 0
    out = store.submit_insert_groups([[other], [_job()], [other]]).result()
    assert out[0][0].created and out[2][0].created  # 5 of 5
    assert isinstance(out[1], QuotaExceeded) and out[1].details["used"] == 2
    assert asked["insert_keyless"] == 2 and asked["owner_counts"] == 2  # refused, checked


def _odd(i: int) -> JobSpec:
    """Jobs whose text COPY must escape or keep as is: tabs, newlines, backslashes,
    carriage returns, \\N lookalikes, non-ASCII, empty strings, big numbers, and None."""
    from datetime import timedelta

    from jobctl.domain.models import Backoff

    odd = ["a\tb", "line1\nline2", "back\\slash", "cr\rlf", "\\N", "ünïcødé 💥", "", "\b\v\f"]
    return JobSpec(
        ("sh", "-c", odd[i % len(odd)], odd[(i + 3) % len(odd)] or "x"),
        T0 + timedelta(days=36500, milliseconds=i),  # far: a big ms count
        2**31 - 1 - i,
        key=None if i % 3 else f"k\t\\{i}\n✓",
        queue=f"q-{i % 2}",
        priority=-(i % 7),
        timeout=None if i % 2 else 86400.0 * 7,
        backoff=Backoff(0.5, 9999.0),
        env=(("K", odd[i % len(odd)]),) if i % 4 else (),
        cwd="/tmp/dir with\ttab" if i % 5 == 0 else "/",
        on_failure=None if i % 2 else "echo \\ failed\n",
    )


def test_a_large_batch_stores_each_row_as_its_encoder_made_it(store: Any) -> None:
    """The COPY path (> PIPELINED_MAX jobs) stores exactly :func:`row_tail`'s values, with
    the key and fingerprint the answers give, for odd text and numbers too; and what a
    job read back gives is what the insert answered."""
    from jobctl.store.jobrow import INSERT_COLUMNS, TextMemo, row_tail
    from jobctl.store.pg.inserts import PIPELINED_MAX
    from jobctl.store.rows import to_ms

    specs = [_odd(i) for i in range(PIPELINED_MAX + 40)]
    (out,) = store.submit_insert_groups([specs]).result()
    now_ms = to_ms(T0)
    ids = [i.job.id for i in out]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)  # in order, as taken
    cols = ", ".join(INSERT_COLUMNS)
    with store.db.pool.connection() as conn:
        got = {
            r["id"]: r
            for r in conn.execute(f"SELECT {cols}, status FROM jobs WHERE id = ANY(%s)", [ids])
        }
    text = TextMemo()
    for spec, ins in zip(specs, out, strict=True):
        row = got[ins.job.id]
        assert row["status"] == "scheduled"
        want_key = spec.key or f"job-{now_ms:012x}{ins.job.id:016x}"
        assert (row["key"], ins.job.key) == (want_key, want_key)
        assert row["fingerprint"] == ("" if spec.key is None else spec.fingerprint())
        assert tuple(row[c] for c in INSERT_COLUMNS[3:]) == row_tail(spec, now_ms, text)
        assert store.get(ins.job.id, attempts=False) == ins.job
