"""PostgreSQL only: the daemon's single-job enqueues pipelined by the event loop itself
(store/pg/loopcommit.py, through ``PostgresStore.insert_groups_on_loop``).

The loop sends the group commit and reads its answers as the socket allows: no committer
thread runs it. Everything else is the group commit's: a refused group is answered alone
the checked way, a connection not ready sends the write to the committer threads, a
connection lost once ``COMMIT`` went out is 503 for the unkeyed callers while the keyed
ones are sent again and answered as that commit would have, and the audit records that
ride the commit are stored once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from jobctl.domain.audit import AuditRecord
from jobctl.domain.models import JobSpec
from jobctl.errors import KeyConflict, StoreUnavailable
from jobctl.store.pg.rawpipe import Pipe
from tests.contract.conftest import PG_DSN
from tests.contract.pgcount import T0, pg_store, round_trips
from tests.contract.pglose import (
    free_queue,
    hold_queue,
    stored_keys,
    swallow_answers,
    wait_for,
    waits_for_a_lock,
)

pytestmark = pytest.mark.postgres


class _Quiet:
    """No ``NOTIFY`` after a commit (its own round trips would blur the counts)."""

    def wake(self, queues: Any, elsewhere: Any = None) -> bool:
        return False


@pytest.fixture
def store() -> Iterator[Any]:
    for s in pg_store():
        s.loop_inserts._notifier = _Quiet()
        s._inserts._notifier = _Quiet()
        yield s


@pytest.fixture
def ready(store: Any) -> Any:
    """``store`` with the loop's connection open (it opens on first use, in the
    background: the first enqueues go the committer threads' way meanwhile)."""
    store.db.open_loop_pool().wait(timeout=10)
    store.insert([_job()])  # the statements' first run: the same plans from now on
    return store


@pytest.fixture
def peer() -> Iterator[Any]:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        yield conn


def _job(key: str | None = None, command: str = "true") -> JobSpec:
    return JobSpec((command,), T0, 1000, key=key)


def _rec(n: int) -> AuditRecord:
    return AuditRecord(T0, f"r-{n}", 1000, 100, 4242, "jobs", "queue:a", 201)


def _on_loop(store: Any, groups: list[list[JobSpec]]) -> list[Any]:
    return list(asyncio.run(store.insert_groups_on_loop(groups)))


def _ids(store: Any) -> list[str]:
    return sorted(r.request_id for r in store.list_audit(limit=100))


def test_the_loop_commits_single_job_enqueues_without_a_committer_thread(ready: Any) -> None:
    ready.audit([_rec(1)])  # rides the loop's commit
    with round_trips("jobctl-pg-commit") as trips:
        out = _on_loop(ready, [[_job()] for _ in range(6)])
    assert all(o[0].created for o in out) and len({o[0].job.id for o in out}) == 6
    assert ready.loop_inserts.commits.committed == 1
    assert trips.n == 0  # no committer thread had a round trip
    assert all(ready.get(o[0].job.id).id == o[0].job.id for o in out)
    assert _ids(ready) == ["r-1"]


def test_a_commit_whose_readiness_never_comes_is_read_by_the_backstop(ready: Any) -> None:
    """The event loop told of nothing (its reader never called: what a server restart
    once caused, a commit waiting the whole ANSWER_WAIT): the backstop's looks send and
    read it all the same, within a few of its intervals."""
    from jobctl.store.pg.pipelined import ANSWER_WAIT

    async def run() -> tuple[list[Any], float]:
        loop = asyncio.get_running_loop()
        loop.add_reader = lambda *args: None  # type: ignore[method-assign]
        began = loop.time()
        out = await ready.insert_groups_on_loop([[_job()], [_job()]])
        return list(out), loop.time() - began

    out, took = asyncio.run(run())
    assert all(o[0].created for o in out)
    assert ready.loop_inserts.commits.committed == 1  # on the loop, not the threads
    assert took < ANSWER_WAIT / 10


def test_before_the_loops_connection_is_ready_the_committer_threads_commit(store: Any) -> None:
    """The first use opens it without waiting for the server; that write goes the usual way.
    (The loop's connection is held back until the write is answered: a connection that
    came within the lend's wait on a loaded host would otherwise make this a race.)"""
    assert store.db.loop_pool is None
    connected = threading.Event()
    configure = store.db._configure

    def held(conn: Any) -> None:
        connected.wait(10)
        configure(conn)

    store.db._configure = held
    try:
        (out,) = _on_loop(store, [[_job()]])
        assert out[0].created and store.get(out[0].job.id).id == out[0].job.id
        assert store.loop_inserts.commits.committed == 0
    finally:
        connected.set()


def test_a_refused_group_is_answered_alone_and_its_neighbours_committed(ready: Any) -> None:
    """A key already stored for another body fails the pipelined ``INSERT``: nothing is
    committed, and the checked way answers that group's conflict, the others' jobs."""
    ready.insert([_job("k1", command="other")])
    conflict, fine = _on_loop(ready, [[_job("k1")], [_job()]])
    assert isinstance(conflict, KeyConflict)
    assert fine[0].created and ready.get(fine[0].job.id).id == fine[0].job.id
    assert ready.loop_inserts.commits.committed == 0


def test_a_payload_job_goes_the_checked_way(ready: Any) -> None:
    from jobctl.domain.workers import payload_text

    spec = JobSpec((), T0, 1000, queue="work", payload=payload_text({"task": "m:f"}))
    (out,) = _on_loop(ready, [[spec]])
    assert out[0].created and ready.loop_inserts.commits.committed == 0


def test_lost_once_sent_keyed_groups_are_sent_again_unkeyed_ones_are_503(
    ready: Any, peer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``COMMIT`` ran, its answers were lost: the keyed group is answered as that commit
    would have (created, stored once), the unkeyed one 503 (sent again, it could be stored
    twice); the audit record that commit carried is stored once."""
    ready.audit([_rec(1)])
    real = Pipe.send

    def send(pipe: Any) -> bool:
        sent = real(pipe)
        monkeypatch.undo()  # once: the second run is not lost
        wait_for(lambda: stored_keys(peer, ready.db.schema, "k1") == 1)  # COMMIT ran
        swallow_answers(pipe)
        return sent

    monkeypatch.setattr(Pipe, "send", send)
    keyed, unkeyed = _on_loop(ready, [[_job("k1")], [_job()]])
    assert keyed[0].created and ready.get(keyed[0].job.id).key == "k1"
    assert isinstance(unkeyed, StoreUnavailable)
    assert stored_keys(peer, ready.db.schema, "k1") == 1
    assert _ids(ready) == ["r-1"]
    assert _on_loop(ready, [[_job()]])[0][0].created  # the loop's pool serves on


def test_cancelled_in_flight_it_reads_the_answers_so_the_rider_knows(ready: Any, peer: Any) -> None:
    """The loop shutting down mid-commit: the answers are read to the end (the loop
    blocks for them), so the job is stored and the audit record that commit carried is
    neither lost nor stored twice."""
    ready.audit([_rec(1)])
    hold_queue(peer, ready.db.schema, "default")

    async def cancel_it() -> None:
        task = asyncio.ensure_future(ready.insert_groups_on_loop([[_job()]]))
        await asyncio.sleep(0.3)  # sent: its server process waits for the queue's lock
        threading.Timer(0.3, free_queue, (peer, ready.db.schema, "default")).start()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_it())
    assert ready.loop_inserts.commits.committed == 0
    ready.flush_audit()
    assert _ids(ready) == ["r-1"]
    assert len(ready.list_jobs(None, None, 10, None)) == 2  # the fixture's and this one


def test_a_connection_lost_mid_commit_leaves_the_loop_no_watch_on_its_old_socket(
    ready: Any, peer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server ends the loop's connection while its commit waits for a lock: libpq
    closes its socket as it reads that (inside the loop's reader), and the daemon's loop
    (uvloop) must be left watching nothing under the numbers it watched. A watch left
    behind was inherited by the next connection given that number: never told it was
    readable (its commits found only by the backstop), or, after an error on the dead
    socket, refused with "the handler is closed" on every commit while it lived (a
    server crash test's single-job enqueues answered 503 for seconds). Here the backstop
    is out of reach (a minute), so a commit the loop is not told of fails the test."""
    import uvloop

    from jobctl.store.pg import loopcommit

    monkeypatch.setattr(loopcommit, "BACKSTOP", 60.0)
    server: list[int] = []  # the server process of each pipelined commit
    real = Pipe.send

    def send(pipe: Any) -> bool:
        server.append(pipe._pg.backend_pid)
        return real(pipe)

    monkeypatch.setattr(Pipe, "send", send)
    hold_queue(peer, ready.db.schema, "default")

    async def lose_it() -> Any:
        loop = asyncio.get_running_loop()
        watched: set[int] = set()
        add = loop.add_reader

        def add_reader(fd: Any, *args: Any) -> None:
            watched.add(fd if isinstance(fd, int) else fd.fileno())
            add(fd, *args)

        loop.add_reader = add_reader  # type: ignore[method-assign,assignment]
        task = asyncio.ensure_future(ready.insert_groups_on_loop([[_job()]]))
        await asyncio.to_thread(wait_for, lambda: server and waits_for_a_lock(peer, server[0]))
        peer.execute("SELECT pg_terminate_backend(%s)", (server[0],))
        (out,) = await task
        free_queue(peer, ready.db.schema, "default")
        for number in watched:
            await _told_when_readable(number)
        # the pool's new connection (its wait() is for the first fill only: the next
        # commit could otherwise find none ready and go the committer threads' way)
        pool = ready.db.open_loop_pool()
        await asyncio.to_thread(wait_for, lambda: pool.get_stats()["pool_available"] >= 1, 10)
        (again,) = await asyncio.wait_for(ready.insert_groups_on_loop([[_job()]]), 10)
        return out, again

    committed = ready.loop_inserts.commits.committed
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            out, again = runner.run(lose_it())
    finally:
        free_queue(peer, ready.db.schema, "default")  # (a second unlock: a no-op)
    assert isinstance(out, StoreUnavailable)  # unkeyed: its COMMIT may have run
    assert again[0].created
    assert ready.loop_inserts.commits.committed == committed + 1  # on the loop's connection


async def _told_when_readable(number: int) -> None:
    """A new socket given ``number``, if it is free, is watched by the running loop like
    any: its reader is called once it is readable. (Taken by another file meanwhile, it
    is left alone: the next commit tells, when the loop's new connection holds it.)

    The socket is made by taking the lowest free numbers until ``number`` comes up, not
    by ``dup2``, which would close whatever another thread opened there meanwhile."""
    pair = _pair_holding(number)
    if pair is None:
        return
    watched, other = pair
    loop = asyncio.get_running_loop()
    with watched, other:
        told: asyncio.Future[None] = loop.create_future()
        loop.add_reader(number, _settle, told)
        try:
            other.send(b"x")
            await asyncio.wait_for(told, 5)
        finally:
            loop.remove_reader(number)


def _pair_holding(number: int) -> tuple[Any, Any] | None:
    """A socket pair whose first end is file ``number``, or None if it is taken."""
    import socket

    spare: list[socket.socket] = []
    try:
        while True:
            a, b = socket.socketpair()
            if b.fileno() == number:
                a, b = b, a
            if a.fileno() == number:
                return a, b
            spare += [a, b]
            if min(a.fileno(), b.fileno()) > number:
                return None  # taken by another file
    finally:
        for s in spare:
            s.close()


def _settle(told: asyncio.Future[None]) -> None:
    if not told.done():
        told.set_result(None)
