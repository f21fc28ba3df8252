"""PostgreSQL only: audit records ride along with the group commit, one statement for all.

Each request's record used to be a group-commit write of its own (a savepoint, an
``INSERT`` and a release, sometimes a commit of its own: issue 15's benchmark). What the
trail holds is the store contract's (tests/contract/test_audit_contract.py); this checks
the statements, that a record the server refuses sinks nothing else, and that an idle
daemon still writes its records.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from jobctl.domain.audit import AuditRecord
from jobctl.domain.models import JobSpec
from tests.contract.pgcount import T0, count_queries, pg_store

pytestmark = pytest.mark.postgres


@pytest.fixture
def store() -> Iterator[Any]:
    yield from pg_store()


def _rec(n: int, target: str = "queue:a") -> AuditRecord:
    return AuditRecord(T0, f"r-{n}", 1000, 100, 4242, "jobs", target, 201)


def test_records_of_many_requests_are_written_by_one_statement(store: Any) -> None:
    asked = count_queries(store)
    for n in range(20):  # one request each
        store.audit([_rec(n)])
    store.insert([JobSpec(("true",), T0, 1000)])  # its commit carries them
    store.flush_audit()
    assert asked["insert_audit"] == 0
    assert 1 <= asked["insert_audit_rows"] <= 2  # 2: the idle write raced the insert
    got = store.list_audit(limit=100)
    assert [r.request_id for r in reversed(got)] == [f"r-{n}" for n in range(20)]  # in order
    assert got[0] == AuditRecord(T0, "r-19", 1000, 100, 4242, "jobs", "queue:a", 201, id=got[0].id)


def test_a_record_the_server_refuses_sinks_neither_the_others_nor_the_write(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store.audit([_rec(1), _rec(2, target="queue:a\x00b"), _rec(3)])  # text holds no NUL
    with caplog.at_level(logging.ERROR, logger="jobctl.store"):
        (job,) = store.insert([JobSpec(("true",), T0, 1000)])
        store.flush_audit()
    assert job.created and store.get(job.job.id) is not None
    assert [r.request_id for r in store.list_audit()] == ["r-3", "r-1"]
    assert "event=audit_write_failed records=1 request_id=r-2" in caplog.text


def test_records_of_an_idle_daemon_are_written_without_a_flush(store: Any) -> None:
    store.audit([_rec(1)])
    written = threading.Event()
    for _ in range(500):  # RIDE_WAIT (0.1 s) and a commit; bounded at about 5 s
        if store.list_audit():
            written.set()
            break
        written.wait(0.01)
    assert written.is_set()


def test_queued_records_start_no_thread(store: Any) -> None:
    """The idle ride is the group commit's own wait (at most ``RIDE_EVERY``): a timer
    thread started per request that found none armed took a tenth of the event loop's
    time under a steady enqueue (issue 15's benchmark)."""
    before = threading.active_count()
    for n in range(50):
        store.audit([_rec(n)])
        assert threading.active_count() == before
    store.flush_audit()
    assert len(store.list_audit(limit=100)) == 50


def test_a_failing_write_leaves_nothing_alone_or_in_a_batch(store: Any) -> None:
    """A commit of one write has no savepoint: its failure must still undo its statements;
    in a batch, the others' writes are kept."""
    from jobctl.store.audit import audit_params

    def bad(conn: Any) -> None:
        conn.execute(store.db.q("insert_audit"), audit_params(_rec(0)))
        raise ValueError("refused")

    def good(conn: Any) -> None:
        conn.execute(store.db.q("insert_audit"), audit_params(_rec(1)))

    with pytest.raises(ValueError):
        store.db.write(bad)  # alone
    assert store.list_audit() == []
    futures = [store.db.submit(f) for f in (good, bad, good)]  # likely one batch
    assert [f.exception() is None for f in futures] == [True, False, True]
    assert [r.request_id for r in store.list_audit()] == ["r-1", "r-1"]
