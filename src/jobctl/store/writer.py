"""Group commit: one writer thread, one connection, many requests per transaction.

Every write in the daemon is a function of a connection handed to :meth:`Writer.submit`.
The writer thread takes everything queued, runs it inside one ``BEGIN IMMEDIATE``
transaction (each function in its own savepoint, so one failure does not sink its
neighbours), commits once with ``synchronous=FULL`` and only then resolves the futures.
A caller is therefore answered only after its change is on disk, yet N concurrent
callers share one fsync. It is also the only writer connection: SQLite allows one
writer at a time, and one thread never fights itself for the lock.

A :class:`Rider` (the audit trail) adds rows to whatever transaction commits next, so
they cost no fsync of their own while there is traffic. When it has rows waiting it
nudges the writer (:meth:`Writer.nudge`), which then commits them alone only if no other
write comes within ``ride_wait`` seconds. A nudge wakes only an idle writer: a busy one
looks for waiting rows itself before it next waits (a nudge per request, and the wake-up
of the writer thread it caused, cost about a tenth of a single-job enqueue).
"""

from __future__ import annotations

import errno
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, Protocol, TypeVar

from jobctl.errors import OutOfResources, StorageFull, StoreCorrupt
from jobctl.logfmt import logval
from jobctl.lograte import RateLimitedLog
from jobctl.store.sqltx import savepoint

T = TypeVar("T")
log = logging.getLogger("jobctl.store")


def _same(exc: BaseException) -> BaseException:
    return exc


def _never() -> BaseException | None:
    return None


#: SQLite primary result codes that mean the disk, not the request: SQLITE_IOERR, SQLITE_FULL.
_DISK_CODES = {10, 13}
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG}
#: Seconds a caller refused by a full disk is told to wait (``Retry-After``).
DISK_RETRY_AFTER = 5


def disk_error(exc: BaseException) -> StorageFull | None:
    """The refusal to answer for a write that met a full disk or an I/O error, else None.

    Such a write changed nothing (its transaction is rolled back); it is refused for now,
    not for good, so the API answers 503 with ``Retry-After`` and the executor retries.
    """
    if isinstance(exc, StorageFull):
        return exc
    if isinstance(exc, sqlite3.Error):
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in _DISK_CODES:
            return None
    elif not (isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS):
        return None
    return StorageFull(
        f"the store cannot write: {exc}; nothing was written, try again later",
        retry_after=DISK_RETRY_AFTER,
    )


#: SQLITE_NOMEM and SQLITE_CANTOPEN: while the daemon runs, out of memory or descriptors.
_RESOURCE_CODES = {7, 14}
_RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN}
#: Seconds a caller is told to wait after a request ran out of resources.
RESOURCE_RETRY_AFTER = 1.0


def resource_error(exc: BaseException) -> OutOfResources | None:
    """The refusal to answer for a call that ran out of descriptors or memory, else None.

    A daemon at its open-file limit (a flood of connections, thousands of running jobs)
    fails reads too; that is transient (issue 11: never a 500), so 503 + ``Retry-After``.
    """
    if isinstance(exc, OutOfResources):
        return exc
    if isinstance(exc, sqlite3.Error):
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in _RESOURCE_CODES:
            return None
    elif not (isinstance(exc, OSError) and exc.errno in _RESOURCE_ERRNOS):
        return None
    return OutOfResources(
        f"the daemon is out of resources for now: {exc}; try again shortly",
        retry_after=RESOURCE_RETRY_AFTER,
    )


_Op = tuple[Callable[[sqlite3.Connection], Any], Future[Any], bool]  # bool: no transaction
#: Queued by :meth:`Writer.nudge`: a rider has rows; commit them soon even if idle.
_RIDE = object()
#: How long rows of a rider wait for another write to share its commit.
RIDE_WAIT = 0.1


class Rider(Protocol):
    """Rows that ride along with the next commit (see the module docstring)."""

    def pending(self) -> bool:
        """Whether rows wait for a commit."""
        ...

    def ride(self, conn: sqlite3.Connection) -> Callable[[bool], None] | None:
        """Write the waiting rows in the open transaction (never raising); return what to
        call after the commit with whether it succeeded, or None if nothing was written."""
        ...


def _nothing(conn: sqlite3.Connection) -> None:
    return None


class Writer:
    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        batch_max: int = 1024,
        rider: Rider | None = None,
        ride_wait: float = RIDE_WAIT,
        errors: RateLimitedLog | None = None,
        translate: Callable[[BaseException], BaseException] = _same,
        refusal: Callable[[], BaseException | None] = _never,
    ) -> None:
        """``translate`` turns a failure into the error callers get (a corrupt file into
        ``StoreCorrupt``); while ``refusal()`` returns an error, every write fails with it
        at once, without touching the file (see :mod:`jobctl.store.health`)."""
        self._connect = connect
        #: A failing disk fails every commit: one line a minute, with a count, not each.
        self._errors = errors
        self._batch_max = batch_max
        self._translate = translate
        self._refusal = refusal
        self._rider = rider
        self._ride_wait = ride_wait
        self._queue: queue.SimpleQueue[_Op | object | None] = queue.SimpleQueue()
        #: True while the writer thread is about to wait, or waits, for the next write.
        self._idle = False
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="jobctl-writer", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def submit(self, fn: Callable[[sqlite3.Connection], T], bare: bool = False) -> Future[T]:
        fut: Future[T] = Future()
        if not self._thread.is_alive():
            fut.set_exception(RuntimeError("store writer is closed"))
            return fut
        refused = self._refusal()
        if refused is not None:
            fut.set_exception(refused)
            return fut
        self._queue.put((fn, fut, bare))
        return fut

    def outside_transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the writer connection between transactions (e.g. a checkpoint)."""
        return self.submit(fn, bare=True).result()

    def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return self.submit(fn).result()

    def nudge(self) -> None:
        """The rider has rows: commit them within ``ride_wait`` seconds, with other writes
        if any come, else alone. Only an idle writer needs the wake-up: a busy one checks
        :meth:`Rider.pending` before it waits again (:meth:`_wait_first`)."""
        if self._idle:
            self._queue.put(_RIDE)

    def close(self) -> None:
        if self._thread.is_alive():
            if self._rider is not None and self._rider.pending():
                self.call(_nothing)  # what rides must not be lost on a clean stop
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:  # surfaced to the constructor
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while (batch := self._next_batch()) is not None:
                try:
                    self._handle(conn, batch)
                except BaseException as exc:  # a bug, never a caller's doing: keep serving
                    log.exception("event=writer_batch_failed writes=%d", len(batch))
                    _rollback(conn)
                    for _, fut, _ in batch:
                        _settle(fut, False, exc)
        finally:
            conn.close()

    def _handle(self, conn: sqlite3.Connection, batch: list[_Op]) -> None:
        bare = [op for op in batch if op[2]]
        if len(bare) < len(batch):
            self._commit_unless_refused(conn, [op for op in batch if not op[2]])
        for fn, fut, _ in bare:
            _resolve(fut, fn, conn, self._translate)

    def _wait_first(self) -> object:
        """The first item of the next batch, or ``_RIDE`` when a rider's rows wait.

        ``_idle`` is set before the rider is asked: rows added after the question find
        the writer idle and nudge it, rows added before are the answer, so none are left
        waiting for traffic that may never come (the GIL orders the two threads' steps).
        """
        self._idle = True
        try:
            if self._rider is not None and self._rider.pending():
                return _RIDE
            return self._queue.get()
        finally:
            self._idle = False

    def _next_batch(self) -> list[_Op] | None:
        first = self._wait_first()
        while first is _RIDE:  # wait a little for a write the rider's rows can join
            try:
                first = self._queue.get(timeout=self._ride_wait)
            except queue.Empty:
                first = (_nothing, Future(), False)
        if first is None:
            return None
        batch: list[_Op] = [first]  # type: ignore[list-item]
        while len(batch) < self._batch_max:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self._queue.put(None)  # close after this batch
                break
            if item is not _RIDE:  # this batch commits anyway: the rider joins it
                batch.append(item)  # type: ignore[arg-type]
        return batch

    def _commit_unless_refused(self, conn: sqlite3.Connection, batch: list[_Op]) -> None:
        """Commit ``batch``; writes queued before the store was found corrupt are refused
        there and then, without touching the file (riders' rows wait, bounded)."""
        refused = self._refusal()
        if refused is None:
            self._commit(conn, batch)
            return
        for _, fut, _ in batch:
            _settle(fut, False, refused)

    def _commit(self, conn: sqlite3.Connection, batch: list[_Op]) -> None:
        outcomes: list[tuple[bool, Any]] = []
        landed: Callable[[bool], None] | None = None
        try:
            conn.execute("BEGIN IMMEDIATE")
            for fn, _, _ in batch:
                outcomes.append(_run_in_savepoint(conn, fn))
            if self._rider is not None:
                landed = self._rider.ride(conn)
            conn.execute("COMMIT")
        except BaseException as exc:  # the whole transaction failed: nobody is durable
            failure = _caller_error(self._translate, exc)
            if not isinstance(failure, StoreCorrupt):  # that is logged once, by translate
                self._failed(len(batch), exc)
            _rollback(conn)
            if landed is not None:
                landed(False)
            for _, fut, _ in batch:
                _settle(fut, False, failure)
            return
        if landed is not None:
            landed(True)
        if self._errors is not None:
            self._errors.recovered("event=group_commit_recovered")
        for (_, fut, _), (ok, value) in zip(batch, outcomes, strict=True):
            _settle(fut, ok, value if ok else self._translate(value))

    def _failed(self, writes: int, exc: BaseException) -> None:
        msg = "event=group_commit_failed writes=%d error=%s"
        if self._errors is None:
            log.error(msg, writes, logval(exc))
        else:
            self._errors.error(str(exc), msg, writes, logval(exc))


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back what is left of a failed transaction (SQLite may have rolled it back)."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            log.error("rollback failed: %s", exc)


def _resolve(
    fut: Future[Any],
    fn: Callable[[sqlite3.Connection], Any],
    conn: sqlite3.Connection,
    translate: Callable[[BaseException], BaseException],
) -> None:
    try:
        value = fn(conn)
    except BaseException as exc:  # whatever a caller's function raises is its answer
        _settle(fut, False, _caller_error(translate, exc))
        return
    _settle(fut, True, value)


def _settle(fut: Future[Any], ok: bool, value: Any) -> None:
    """Answer ``fut`` with a result (``ok``) or an exception, unless nobody waits.

    A caller may cancel its future at any time (a client timed out, the event loop
    closed); its write still ran and committed with the batch, there is just no one
    to tell. ``set_result`` on a cancelled future raises ``InvalidStateError``, which
    on this thread would end the writer and leave the rest of the batch unanswered.
    """
    if fut.done():
        return
    try:
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)
    except InvalidStateError:  # cancelled between the check and the answer
        pass


def _caller_error(
    translate: Callable[[BaseException], BaseException], exc: BaseException
) -> BaseException:
    """What a caller gets for ``exc``: a corrupt file (``translate``), else a full disk or
    an I/O error (:func:`disk_error`), else ``exc`` itself."""
    error = translate(exc)
    return error if error is not exc else (disk_error(exc) or exc)


def _run_in_savepoint(
    conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], Any]
) -> tuple[bool, Any]:
    try:
        # a disk error is the disk, not this op: SQLite may have ended the transaction
        with savepoint(conn, "op", lost=disk_error):
            value = fn(conn)
    except Exception as exc:
        if disk_error(exc) is not None:
            raise
        return False, exc
    return True, value
