"""Single-job and batch enqueues on PostgreSQL as group-commit writes: the committer
threads' way (:class:`InsertBatcher`) and the event loop's (:class:`LoopInserts`).

Both build the same write (:class:`_InsertWrite`) for the callers they hold and answer
each caller alone, after the commit; they differ only in who drives the pipelined
commit (a committer thread of :class:`jobctl.store.pg.groupcommit.GroupCommit`, or the loop itself:
:mod:`jobctl.store.pg.loopcommit`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from jobctl.domain.models import JobSpec
from jobctl.errors import JobctlError
from jobctl.store.base import Inserted
from jobctl.store.pg.db import PgConn, PgDb
from jobctl.store.pg.inserts import KeylessPlan, insert_groups_tx
from jobctl.store.pg.loopcommit import LoopCommit
from jobctl.store.pg.notify import Notifier
from jobctl.store.pg.pipelined import Staged
from jobctl.store.pg.rawpipe import Pipe
from jobctl.store.pg.resend import Caller, lost_answers, split_keyed

_Caller = Caller
_Outcomes = list[list[Inserted] | JobctlError]


class InsertBatcher:
    """Insert groups of concurrent callers as one write: one id fetch, one ``COPY`` and one
    counter update per lane for all of them, instead of a write each.

    Why: on PostgreSQL every insert of a lane updates that lane's counter row, held until
    commit; one write per caller made the callers queue on that row, one commit at a
    time. One write of inserts is in flight at a time; the groups that arrive meanwhile
    form the next one. Each caller is answered after the commit.
    """

    def __init__(self, db: PgDb, notifier: Notifier) -> None:
        self._db = db
        self._notifier = notifier
        self._lock = threading.Lock()
        self._waiting: list[_Caller] = []
        self._busy = False  # a write of ours is queued or running

    def submit(
        self, groups: Sequence[Sequence[JobSpec]]
    ) -> Future[list[list[Inserted] | JobctlError]]:
        fut: Future[list[list[Inserted] | JobctlError]] = Future()
        with self._lock:
            self._waiting.append((groups, fut))
            start, self._busy = not self._busy, True
        if start:
            self._start()
        return fut

    def _start(self) -> None:
        """One write for everyone waiting when it runs; the next starts when it is done,
        so the callers that came meanwhile share a commit instead of a lock queue."""
        write = _InsertWrite(self._db, self._take)
        self._db.submit(write).add_done_callback(lambda done: self._done(done, write.taken))

    def _take(self) -> list[_Caller]:
        with self._lock:
            taken, self._waiting = self._waiting, []
        return taken

    def _done(self, done: Future[Any], taken: list[_Caller]) -> None:
        """Answer the write's callers, start the next write, then wake the other daemons
        (a ``NOTIFY`` of its own, a round trip and a commit on this committer thread: the
        next write must not wait for it, the other committer thread takes that one)."""
        settled = taken if done.exception() is None else (taken or self._take())
        ok = answer_callers(done, settled)
        with self._lock:
            self._busy = bool(self._waiting)
            again = self._busy
        if again:
            self._start()
        if ok:
            self._notifier.wake(queues_of(taken))


class LoopInserts:
    """Insert groups of one event-loop batch (the daemon's ``AsyncStore.inserts``) as one
    write whose pipelined commit the loop drives itself (:class:`LoopCommit`); the
    committer threads' way (:class:`InsertBatcher`) when the loop cannot (no connection
    ready). Each group is a caller of its own: a lost commit's resend keeps the keyed
    groups and answers the others 503, each alone."""

    def __init__(self, db: PgDb, notifier: Notifier, batcher: InsertBatcher) -> None:
        self._db = db
        self._notifier = notifier
        self._batcher = batcher
        self.commits = LoopCommit(db)

    async def insert(self, groups: Sequence[Sequence[JobSpec]]) -> _Outcomes:
        """Each group's outcome (its jobs, or the error refusing it alone), once committed;
        an error that is no jobctl error (a bug) is raised for them all."""
        slots = [Slot() for _ in groups]
        callers: list[_Caller] = [([g], slot) for g, slot in zip(groups, slots, strict=True)]
        write = _InsertWrite(self._db, lambda: callers)
        done = await self.commits.commit(write)
        if done is None:  # nothing sent: the committer threads' way
            return await asyncio.wrap_future(self._batcher.submit(groups))
        if answer_callers(done, write.taken or callers):
            loop = asyncio.get_running_loop()
            self._notifier.wake(
                queues_of(write.taken), lambda send: loop.run_in_executor(None, send)
            )
        return [slot.outcome() for slot in slots]


class Slot:
    """One caller's answer in the loop's batch: set once, on the loop or on the thread
    the loop waits for (a lost commit's recovery), and read on the loop after; so no
    lock, where a :class:`concurrent.futures.Future` takes one per call (four calls per
    caller, about a tenth of the loop's commit)."""

    __slots__ = ("_error", "_set", "_value")

    def __init__(self) -> None:
        self._set = False
        self._value: list[list[Inserted] | JobctlError] = []
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._set

    def set_result(self, result: list[list[Inserted] | JobctlError]) -> None:
        self._set, self._value = True, result

    def set_exception(self, exception: BaseException | None) -> None:
        self._set, self._error = True, exception

    def outcome(self) -> list[Inserted] | JobctlError:
        """The group's outcome (its jobs, or the error refusing it); an error that is no
        jobctl error (a bug) is raised."""
        assert self._set  # the commit's outcome settled every caller
        error = self._error
        if error is None:
            return self._value[0]
        if isinstance(error, JobctlError):
            return error
        raise error


def answer_callers(done: Future[Any], taken: list[_Caller]) -> bool:
    """Settle each caller of ``taken`` from the write's outcome ``done`` (its slice of
    the outcomes, or the write's error for everyone); True if the write committed."""
    error = done.exception()
    if error is not None:  # nothing of the write is stored: everyone it holds fails
        for _, fut in taken:
            if not fut.done():
                fut.set_exception(error)
        return False
    outcomes, start = done.result(), 0
    for groups, fut in taken:
        if not fut.done():
            fut.set_result(outcomes[start : start + len(groups)])
        start += len(groups)
    return True


def queues_of(taken: list[_Caller]) -> set[str]:
    """The queues of the callers' jobs (the wake-up the other daemons get)."""
    return {s.queue for groups, _ in taken for g in groups for s in g}


class _InsertWrite(Staged[_Outcomes]):
    """One write of :class:`InsertBatcher`: the callers waiting when it first runs (kept
    if the transaction is run again), pipelined when their groups allow it
    (:class:`KeylessPlan`: single-job enqueues), else checked (:func:`insert_groups_tx`).
    Its pipelined commit lost once sent, the callers whose jobs all carry keys run again
    the checked way, answered as that commit would have answered them (:mod:`resend`)."""

    locks_queues = True  # KeylessPlan.queue: lock_queues_shared

    def __init__(self, db: PgDb, take: Callable[[], list[_Caller]]) -> None:
        self._db = db
        self._take = take
        self.taken: list[_Caller] = []
        self._plan: KeylessPlan | None = None
        self._lost: list[int] = []  # the lost commits' creation times (resend)
        self._found = False  # the run after it found that it had committed

    def _groups(self) -> list[Sequence[JobSpec]]:
        if not self.taken:
            self.taken += self._take()
        return [g for groups, _ in self.taken for g in groups]

    def stage(self) -> bool:
        self._plan = KeylessPlan.make(self._db, self._groups(), keyed=True)
        return self._plan is not None

    def queue(self, pipe: Pipe) -> None:
        assert self._plan is not None  # stage() said so
        self._plan.queue(pipe)

    def answer(self) -> _Outcomes:
        assert self._plan is not None
        return self._plan.answer()

    def resend(self, error: Exception) -> bool:
        """The callers with unkeyed jobs are answered ``error`` (a second run could store
        their jobs twice); the others, if any, run again (see :mod:`resend`)."""
        assert self._plan is not None  # only a staged write is pipelined
        keyed, other = split_keyed(self.taken)
        if not keyed:
            return False
        for _, fut in other:
            if not fut.done():
                fut.set_exception(error)
        self.taken[:] = keyed
        self._lost.append(self._plan.made_ms)
        return True

    def found_committed(self) -> bool:
        return self._found

    def __call__(self, conn: PgConn) -> _Outcomes:
        groups = self._groups()
        if self._lost:
            lost = lost_answers(self._db, conn, groups, self._lost)
            self._found = lost is not None
            if lost is not None:
                return lost
        return insert_groups_tx(self._db, conn, groups)


__all__ = ["InsertBatcher", "LoopInserts", "Slot", "answer_callers", "queues_of"]
