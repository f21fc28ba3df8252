"""The pipelined group commit driven by the event loop itself: the daemon's single-job
enqueues on PostgreSQL.

Why: with 8 clients each sending one job per request, a cycle of ~7.5 jobs is one serial
chain (docs/benchmarks.md, "Session 16"): the loop parses the requests, then hands the
batch to a committer thread (:class:`jobctl.store.pg.groupcommit.GroupCommit`), which builds the
pipeline, waits for the server and wakes the loop again. The two hand-overs (a queue put
and a futex wake one way, ``call_soon_threadsafe``'s self-pipe write the other, and the
GIL passed back and forth each time) are on every cycle's path, and the committer
threads' CPU is on top of the loop's. Here the loop builds the same pipeline
(:func:`jobctl.store.pg.pipelined.queue_all`: ``BEGIN``, the write's statements, the
rider's audit rows, ``COMMIT``), sends it without waiting (libpq is non-blocking on
psycopg's connections), and reads the answers as the socket becomes readable
(``loop.add_reader``, :meth:`jobctl.store.pg.rawpipe.Pipe.take`): no thread, no hop.

Everything else stays the group commit's, exactly as it is:

- A write that cannot be pipelined, or a pipelined commit a statement of which failed
  (nothing committed), runs the checked way on a committer thread (savepoints).
- No connection ready (the loop's own, :attr:`jobctl.store.pg.db.PgDb.loop_pool`: lent
  elsewhere, reconnecting, or hung up by the server while idle): the caller's usual way
  (the committer threads), never a wait on the loop.
- The connection lost once the commit was sent (it may have committed): handed to
  :meth:`jobctl.store.pg.groupcommit.GroupCommit.lost` on a thread, which runs it again the
  checked way only when every write may (keyed enqueues), else answers 503.
- The answer comes only after ``COMMIT`` succeeded; the answers' wait is bounded by
  :data:`jobctl.store.pg.pipelined.ANSWER_WAIT` beside the session's
  ``statement_timeout``; the connection goes back to its pool idle, out of pipeline mode.
- Cancelled while the answers are in flight (the loop shutting down): the answers are
  read to the end right there, so the rider learns whether its records landed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg_pool import PoolTimeout

from jobctl.store.pg.pipelined import ANSWER_WAIT, Staged, Unreachable, hung_up, idle, queue_all
from jobctl.store.pg.rawpipe import Broken, Failed, Pipe

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from jobctl.store.pg.db import PgConn, PgDb

T = TypeVar("T")
#: Seconds the loop waits for its connection at most: none ready means another way.
LEND_WAIT = 0.0001
#: Seconds between two looks of a commit's backstop (:meth:`_Talk.backstop`).
BACKSTOP = 0.05
log = logging.getLogger("jobctl.store")


class LoopCommit:
    """Pipelined commits of :class:`Staged` writes on the running event loop (see the
    module docstring); one at a time (the loop's insert batcher keeps one in flight)."""

    def __init__(self, db: PgDb) -> None:
        self._db = db
        self.committed = 0  # commits done on the loop (tests and benchmarks read it)

    async def commit(self, op: Staged[T]) -> Future[T] | None:
        """``op``'s outcome once settled (done: its answer after ``COMMIT``, or its
        error), or None when nothing was sent and the caller must take its usual way (no
        connection ready). Never waits for the server but through the loop."""
        commits = self._db.commits
        if not op.stage():
            return await _settled(commits.submit(_checked(op)))
        pool = self._db.open_loop_pool()
        conn = _lend(pool)
        if conn is None:
            return None
        taken: list[Any] = []
        try:
            pipe = queue_all(conn, [op], commits.rider, taken)
        except BaseException:
            conn.close()  # unforeseen: its state is unknown, it is not lent again
            pool.putconn(conn)
            raise
        if pipe is None:  # an op could not queue its statements: the checked way
            pool.putconn(conn)
            commits.landed(taken, False)
            return await _settled(commits.submit(_checked(op)))
        return await self._round_trip(op, pool, conn, pipe, taken)

    async def _round_trip(
        self,
        op: Staged[T],
        pool: ConnectionPool[PgConn],
        conn: PgConn,
        pipe: Pipe,
        taken: list[Any],
    ) -> Future[T]:
        commits = self._db.commits
        try:
            await _exchange(pipe)
        except Failed:  # nothing committed: the checked way answers what the op raises
            idle(conn, pipe, sent=True)
            pool.putconn(conn)
            commits.landed(taken, False)
            return await _settled(commits.submit(_checked(op)))
        except asyncio.CancelledError:
            self._finish(op, pool, conn, pipe, taken)
            raise
        except Exception as exc:  # Broken, or unforeseen: COMMIT went out, may have run
            conn.close()
            pool.putconn(conn)
            return await self._recovered(op, pool, taken, Unreachable(exc, sent=True))
        idle(conn, pipe, sent=True)
        pool.putconn(conn)
        commits.landed(taken, True)
        self.committed += 1
        done: Future[T] = Future()
        done.set_result(op.answer())
        return done

    async def _recovered(
        self, op: Staged[T], pool: ConnectionPool[PgConn], taken: list[Any], lost: Unreachable
    ) -> Future[T]:
        """``op``'s outcome after :meth:`GroupCommit.lost`, on a thread of the loop's
        default executor (it may run the op again, waiting for the server, on ``pool``:
        its checked run lends the loop's connection, a fresh one, meanwhile)."""
        fut: Future[T] = Future()
        lose = functools.partial(self._db.commits.lost, [(op, fut)], [op], pool, taken, lost)
        await asyncio.get_running_loop().run_in_executor(None, lose)
        return fut

    def _finish(
        self,
        op: Staged[T],
        pool: ConnectionPool[PgConn],
        conn: PgConn,
        pipe: Pipe,
        taken: list[Any],
    ) -> None:
        """Cancelled with the answers in flight: read them to the end here (blocking, at
        most :data:`ANSWER_WAIT`), so the rider knows whether its records landed."""
        ok = False
        try:
            pipe.wait()
            ok = True
        except Exception:  # failed (nothing committed) or lost (as after any lost commit,
            pass  # its records go in again later); the connection is not lent again
        if ok:
            idle(conn, pipe, sent=True)
        else:
            conn.close()
        pool.putconn(conn)
        self._db.commits.landed(taken, ok)


def _lend(pool: ConnectionPool[PgConn]) -> PgConn | None:
    """The loop's connection if it is ready and alive; None otherwise (a hung-up one is
    dropped: the pool opens another in the background)."""
    try:
        conn = pool.getconn(timeout=LEND_WAIT)
    except PoolTimeout:
        return None
    if hung_up(conn):
        conn.close()
        pool.putconn(conn)
        return None
    return conn


async def _exchange(pipe: Pipe) -> None:
    """Send ``pipe`` and read its answers as the socket allows, on the running loop.
    :class:`Failed` if a statement failed, :class:`Broken` if the connection did or no
    answer came within :data:`ANSWER_WAIT`.

    The loop watches a duplicate of the connection's socket, never libpq's own number:
    libpq closes its socket the moment it reads that the connection is lost (inside
    :meth:`Pipe.take`), after which its number can neither be asked for nor be told to
    the loop again, and uvloop keeps its poll of a number until that number is removed.
    A poll left behind for libpq's number was inherited by the next connection given
    that number: its reader was then never registered (no readiness callback, the commit
    found only by the backstop) or, after the kernel reported an error on the dead
    socket, refused with "the handler is closed" on every commit while that connection
    lived (each single-job enqueue 503 or sent the checked way). The duplicate is this
    exchange's alone: added, removed and closed here, whatever libpq did meanwhile."""
    loop = asyncio.get_running_loop()
    try:
        watch = os.dup(pipe.socket)  # psycopg: OperationalError once the socket is gone
    except (psycopg.OperationalError, OSError) as exc:
        raise Broken(str(exc)) from exc
    talk = _Talk(loop, pipe, watch)
    try:
        try:
            sent = pipe.send()
        except psycopg.OperationalError as exc:
            raise Broken(str(exc)) from exc
        if not sent:  # the socket's buffer is full: the rest goes as it empties
            loop.add_writer(watch, talk.writable)
        loop.add_reader(watch, talk.readable)
        talk.later = loop.call_later(BACKSTOP, talk.backstop)
        talk.readable()  # what libpq may have read while it sent
        await talk.done
    finally:
        if talk.later is not None:
            talk.later.cancel()
        try:
            loop.remove_reader(watch)
            loop.remove_writer(watch)
        finally:
            os.close(watch)
    pipe.outcome()


class _Talk:
    """The socket's callbacks of one :func:`_exchange`; ``done`` once the answers are read
    (or the connection failed)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, pipe: Pipe, watch: int) -> None:
        self._loop = loop
        self._pipe = pipe
        self._watch = watch  # the loop's duplicate of the socket (see :func:`_exchange`)
        self.done: asyncio.Future[None] = loop.create_future()
        self.later: asyncio.TimerHandle | None = None  # the next :meth:`backstop`
        self._looks = 0

    def backstop(self) -> None:
        """Every :data:`BACKSTOP` seconds while the commit is in flight: send what is
        unsent and read what came, as if the socket had said so. Why: once in ~10 runs
        of the server-crash test a commit on a fresh connection after the restart got
        no readiness callback at all and waited the whole :data:`ANSWER_WAIT` (its
        request then answered 503). Its cause, a watch left on libpq's socket number, is
        gone (see :func:`_exchange`); the backstop stays as a guard: any missed event
        costs at most this interval. After :data:`ANSWER_WAIT` in all, the connection is
        taken as broken."""
        if self.done.done():
            return
        self._looks += 1
        if self._looks * BACKSTOP >= ANSWER_WAIT:
            self.end(Broken(f"no answer in {ANSWER_WAIT} s"))
            return
        try:
            self._pipe.flush()
        except psycopg.OperationalError as exc:
            self.end(Broken(str(exc)))
            return
        self.readable()
        if self.done.done():
            log.info("event=pg_loop_commit_backstop waited=%.2fs", self._looks * BACKSTOP)
        else:
            self.later = self._loop.call_later(BACKSTOP, self.backstop)

    def end(self, error: BaseException | None) -> None:
        if self.done.done():
            return
        if error is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(error)

    def readable(self) -> None:
        try:
            if self._pipe.take():
                self.end(None)
        except psycopg.OperationalError as exc:
            self.end(Broken(str(exc)))
        except Exception as exc:  # Broken: an answer to nothing sent
            self.end(exc)

    def writable(self) -> None:
        try:
            if self._pipe.flush():
                self._loop.remove_writer(self._watch)
        except psycopg.OperationalError as exc:
            self.end(Broken(str(exc)))


def _checked(op: Staged[T]) -> Callable[[PgConn], T]:
    """``op`` as a plain write: the group commit runs it the checked way at once (its
    pipelined commit failed, or it cannot be pipelined), not pipelined again."""

    def run(conn: PgConn) -> T:
        return op(conn)

    return run


async def _settled(fut: Future[T]) -> Future[T]:
    """``fut`` once done (a committer thread settles it)."""
    await asyncio.wait([asyncio.wrap_future(fut)])
    return fut


__all__ = ["LoopCommit"]
