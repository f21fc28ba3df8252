"""Group commit: one writer thread, one connection, many requests per transaction.

Every write in the daemon is a function of a connection handed to :meth:`Writer.submit`.
The writer thread takes everything queued, runs it inside one ``BEGIN IMMEDIATE``
transaction (each function in its own savepoint, so one failure does not sink its
neighbours), commits once with ``synchronous=FULL`` and only then resolves the futures.
A caller is therefore answered only after its change is on disk, yet N concurrent
callers share one fsync. It is also the only writer connection: SQLite allows one
writer at a time, and one thread never fights itself for the lock.
"""

from __future__ import annotations

import errno
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from jobctl.errors import StorageFull

T = TypeVar("T")
log = logging.getLogger("jobctl.store")

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


_Op = tuple[Callable[[sqlite3.Connection], Any], Future[Any], bool]  # bool: no transaction


class Writer:
    def __init__(self, connect: Callable[[], sqlite3.Connection], batch_max: int = 1024) -> None:
        self._connect = connect
        self._batch_max = batch_max
        self._queue: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
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
        self._queue.put((fn, fut, bare))
        return fut

    def outside_transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the writer connection between transactions (e.g. a checkpoint)."""
        return self.submit(fn, bare=True).result()

    def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return self.submit(fn).result()

    def close(self) -> None:
        if self._thread.is_alive():
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
                bare = [op for op in batch if op[2]]
                if len(bare) < len(batch):
                    self._commit(conn, [op for op in batch if not op[2]])
                for fn, fut, _ in bare:
                    _resolve(fut, fn, conn)
        finally:
            conn.close()

    def _next_batch(self) -> list[_Op] | None:
        first = self._queue.get()
        if first is None:
            return None
        batch = [first]
        while len(batch) < self._batch_max:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self._queue.put(None)  # close after this batch
                break
            batch.append(item)
        return batch

    def _commit(self, conn: sqlite3.Connection, batch: list[_Op]) -> None:
        outcomes: list[tuple[bool, Any]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for fn, _, _ in batch:
                outcomes.append(_run_in_savepoint(conn, fn))
            conn.execute("COMMIT")
        except BaseException as exc:  # the whole transaction failed: nobody is durable
            log.error("group commit of %d writes failed: %s", len(batch), exc)
            _rollback(conn)
            failure = disk_error(exc) or exc
            for _, fut, _ in batch:
                fut.set_exception(failure)
            return
        for (_, fut, _), (ok, value) in zip(batch, outcomes, strict=True):
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back what is left of a failed transaction (SQLite may have rolled it back)."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            log.error("rollback failed: %s", exc)


def _resolve(
    fut: Future[Any], fn: Callable[[sqlite3.Connection], Any], conn: sqlite3.Connection
) -> None:
    try:
        fut.set_result(fn(conn))
    except Exception as exc:
        fut.set_exception(disk_error(exc) or exc)


def _run_in_savepoint(
    conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], Any]
) -> tuple[bool, Any]:
    conn.execute("SAVEPOINT op")
    try:
        value = fn(conn)
    except Exception as exc:
        if disk_error(exc) is not None:
            raise  # the disk, not this op: SQLite may have ended the transaction already
        conn.execute("ROLLBACK TO op")
        conn.execute("RELEASE op")
        return False, exc
    conn.execute("RELEASE op")
    return True, value
