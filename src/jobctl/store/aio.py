"""Awaitable access to a synchronous store for the daemon's event loop.

Store calls block (on disk, on a group commit) so they run on a dedicated thread pool,
wide enough that many concurrent API requests wait on one group commit together instead
of queueing behind each other.

Enqueues and the executor's per-attempt writes (record a process, finish an attempt) are
batched: :class:`Batcher` gathers every such write made while the previous batch was being
committed and hands them to the store as one op (``submit_insert_groups``,
``record_processes``, ``finish_many``). Those ops need no pool thread where the backend
can return its writer's future (``submit_*``): that is awaited straight from the event
loop with :func:`asyncio.wrap_future`. Each caller still gets its own answer (its jobs,
or the error that refused its request alone), and only after the commit.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, ParamSpec, Protocol, TypeVar, runtime_checkable

from jobctl.domain.models import AttemptResult, Claim, Finished, JobSpec, ProcessRecord
from jobctl.errors import JobctlError
from jobctl.store.base import Inserted, Store
from jobctl.store.claims import ClaimRows, claims_in_order
from jobctl.store.writer import disk_error, resource_error

P = ParamSpec("P")
T = TypeVar("T")
I = TypeVar("I")  # noqa: E741
R = TypeVar("R")

#: Most items in one batched write: bounds one transaction's length.
BATCH_MAX = 1024
#: How long a lingering :class:`Batcher` waits for callers to come back: as long as its
#: last op took, but at least ``LINGER_MIN`` and at most ``LINGER_MAX`` seconds.
LINGER_MIN = 0.0005
LINGER_MAX = 0.005


@runtime_checkable
class SubmitsBatches(Protocol):
    """A backend whose writes can be awaited without a thread (its writer's futures)."""

    def submit_insert_groups(
        self, groups: Sequence[Sequence[JobSpec]]
    ) -> Future[list[list[Inserted] | JobctlError]]: ...

    def submit_finish_many(
        self, items: Sequence[tuple[int, int, AttemptResult]]
    ) -> Future[list[Finished | JobctlError]]: ...

    def submit_record_processes(self, records: Sequence[ProcessRecord]) -> Future[list[int]]: ...


@runtime_checkable
class InsertsOnLoop(Protocol):
    """A backend whose batched inserts the event loop drives itself, no thread between
    (PostgreSQL: the pipelined group commit sent and read on the loop)."""

    async def insert_groups_on_loop(
        self, groups: Sequence[Sequence[JobSpec]]
    ) -> list[list[Inserted] | JobctlError]: ...


@runtime_checkable
class SubmitsRidingFinishes(Protocol):
    """A backend that writes process records riding with their finishes in the finishes'
    own op (SQLite: a success's record by the statement that ends its attempt)."""

    def submit_finish_riding(
        self, items: Sequence[tuple[int, int, AttemptResult]], records: Sequence[ProcessRecord]
    ) -> Future[list[Finished | JobctlError]]: ...


@runtime_checkable
class SubmitsClaims(Protocol):
    """A backend whose claims can be awaited without a thread (SQLite's writer future);
    its rows become claims with :func:`~jobctl.store.claims.claims_in_order`."""

    def submit_claim_rows(self, owner: str, limit: int, lease_ttl: float) -> Future[ClaimRows]: ...


class Batcher(Generic[I, R]):
    """Coalesces single writes into batched ones, one batch in flight at a time.

    The first item starts a drain task, which runs on the loop's next turn, so everything
    submitted in the same turn shares a batch; while a batch commits, new items wait and
    form the next one (group commit: whatever is ready when the writer is free). A
    ``linger`` batcher also waits, after a batch of two or more, for its callers to come
    back (:meth:`_await_stragglers`). ``op`` returns one result per item, in order.
    ``clock`` times the ops (seconds; tests pass their own).
    """

    def __init__(
        self,
        op: Callable[[list[I]], Awaitable[list[R]]],
        limit: int = BATCH_MAX,
        linger: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self._op = op
        self._limit = limit
        self._linger = linger
        self._clock = clock
        self._pending: list[tuple[I, asyncio.Future[R]]] = []
        self._task: asyncio.Task[None] | None = None
        #: While lingering: how many pending items end it, and the future that does.
        self._expected = 0
        self._enough: asyncio.Future[None] | None = None
        #: Seconds the last op took.
        self.last_op = 0.0
        self.batches = 0  # how many ops were sent (tests and benchmarks read it)

    @property
    def busy(self) -> bool:
        """A batch is in flight, or the batcher lingers for the next one."""
        return self._task is not None

    def submit(self, item: I) -> asyncio.Future[R]:
        task = self._task
        # While a drain task runs, this is its loop: asking for the running loop is a
        # getpid() system call per call on Python 3.11 (its fork check), once per enqueue.
        loop = asyncio.get_running_loop() if task is None else task.get_loop()
        fut: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, fut))
        if task is None:
            self._task = loop.create_task(self._drain())
        elif self._enough is not None and len(self._pending) >= self._expected:
            _resolve(self._enough)  # every caller it waits for is back
        return fut

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch = self._pending[: self._limit]
                del self._pending[: self._limit]
                await self._send(batch)
                if self._linger:
                    await self._await_stragglers(len(batch) + len(self._pending))
        finally:
            self._task = None
            for _, fut in self._pending:  # only when cancelled (loop shutting down)
                if not fut.done():
                    fut.cancel()
            self._pending.clear()

    async def _await_stragglers(self, expected: int) -> None:
        """Before the next batch, give the callers just answered a moment to come back.

        Callers that each wait for their answer before sending again (the API's clients)
        otherwise settle into two alternating halves: one half's batch commits while the
        other half's gathers, and every commit, the costliest step of a write, carries half
        of them (single-job enqueues with 8 clients: about 1.4x the rate when they join).
        The wait ends as soon as as many items are pending as the last batch and its
        waiting neighbours held, else after :meth:`linger_bound`. Only after a batch of two
        or more: a lone caller is never kept waiting.

        It waits on a future the returning callers' :meth:`submit` resolves, never by
        spinning the loop: on a busy host the clients need the CPU a spinning loop takes
        (8 turns and 0.5 ms, the former bound, split groups of 8 into 7 + 1 there).
        """
        if expected < 2 or len(self._pending) >= expected:
            return
        loop = asyncio.get_running_loop()
        self._expected = expected
        self._enough = enough = loop.create_future()
        timer = loop.call_later(self.linger_bound(), _resolve, enough)
        try:
            await enough
        finally:
            timer.cancel()
            self._enough = None

    def linger_bound(self) -> float:
        """Seconds :meth:`_await_stragglers` waits at most: as long as the last op took
        (a caller that missed the batch waits for a whole op, then its own; waiting up to
        one op for it saves a commit), within ``LINGER_MIN`` and ``LINGER_MAX``."""
        return min(LINGER_MAX, max(LINGER_MIN, self.last_op))

    async def _send(self, batch: list[tuple[I, asyncio.Future[R]]]) -> None:
        self.batches += 1
        start = self._clock()
        try:
            results = await self._op([item for item, _ in batch])
        except Exception as exc:  # the whole op failed: nobody's write is durable
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            return
        except BaseException:  # cancelled (the loop is closing): nobody gets an answer
            for _, fut in batch:
                fut.cancel()
            raise
        finally:
            self.last_op = self._clock() - start
        for (_, fut), result in zip(batch, results, strict=True):
            if not fut.done():
                fut.set_result(result)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class AsyncStore:
    def __init__(self, store: Store, threads: int = 64) -> None:
        self.store = store
        self.clock = store.clock
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="jobctl-store")
        # Checked once: a runtime protocol check looks up each method, on every write.
        self._submits: SubmitsBatches | None = store if isinstance(store, SubmitsBatches) else None
        self._claims: SubmitsClaims | None = store if isinstance(store, SubmitsClaims) else None
        self._on_loop: InsertsOnLoop | None = store if isinstance(store, InsertsOnLoop) else None
        self._rides: SubmitsRidingFinishes | None = None
        if isinstance(store, SubmitsRidingFinishes):
            self._rides = store
        self.finishes: Batcher[tuple[int, int, AttemptResult], Finished | JobctlError]
        self.finishes = Batcher(self._finish_many)
        self.records: Batcher[ProcessRecord, bool] = Batcher(self._record_processes)
        #: Process records that ride with their attempt's finish (see :meth:`finish`).
        self._riding: dict[tuple[int, int], ProcessRecord] = {}
        self.inserts: Batcher[Sequence[JobSpec], list[Inserted] | JobctlError]
        self.inserts = Batcher(self._insert_groups, linger=True)

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args)`` on the pool; running out of descriptors or memory, or meeting a
        full disk, is raised as the transient refusal it is (503), never a bare error."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))
        except (OSError, sqlite3.Error) as exc:
            refusal = resource_error(exc) or disk_error(exc)
            if refusal is None:
                raise
            raise refusal from exc

    async def claim_due(self, owner: str, limit: int, lease_ttl: float) -> list[Claim]:
        """``store.claim_due``. Where the backend allows, its writer's future is awaited
        straight from the loop (issue 17: the pool thread's hop, its wake-ups and GIL
        hand-overs cost more than the claim's rows to claims, done here after the commit)."""
        if self._claims is None:
            return await self.run(self.store.claim_due, owner, limit, lease_ttl)
        try:
            found, defaults = await asyncio.wrap_future(
                self._claims.submit_claim_rows(owner, limit, lease_ttl)
            )
        except (OSError, sqlite3.Error) as exc:  # as run() says it
            refusal = resource_error(exc) or disk_error(exc)
            if refusal is None:
                raise
            raise refusal from exc
        return claims_in_order(found, defaults)

    async def insert(self, specs: Sequence[JobSpec]) -> list[Inserted]:
        """``store.insert``; raises what it raises. Where the backend allows, the inserts
        of concurrent requests go to it as one batched write (``submit_insert_groups``),
        awaited without parking a pool thread per request, and each caller still gets
        its own answer after the commit."""
        if self._submits is None:
            return await self.run(self.store.insert, specs)
        outcome = await self.inserts.submit(specs)
        if isinstance(outcome, JobctlError):
            raise outcome
        return outcome

    async def _insert_groups(
        self, groups: list[Sequence[JobSpec]]
    ) -> list[list[Inserted] | JobctlError]:
        if self._on_loop is not None:
            return await self._on_loop.insert_groups_on_loop(groups)
        assert self._submits is not None  # only batched where the backend submits
        return await asyncio.wrap_future(self._submits.submit_insert_groups(groups))

    async def finish(
        self,
        job_id: int,
        generation: int,
        result: AttemptResult,
        record: ProcessRecord | None = None,
    ) -> Finished:
        """``store.finish`` batched with its neighbours; raises what ``finish`` raises.

        ``record``: the attempt's process record, not written yet (its command ended
        before the executor sent it): written just before the finish, in the same
        transaction where the backend submits both at once, so a quick command costs one
        commit, not two; where the backend takes both in one op
        (``submit_finish_riding``), a success's record is written with its attempt's end."""
        if record is not None:
            self._riding[(job_id, generation)] = record
        outcome = await self.finishes.submit((job_id, generation, result))
        if isinstance(outcome, JobctlError):
            raise outcome
        return outcome

    async def record_process(self, record: ProcessRecord) -> bool:
        """``store.record_process`` batched; False if the attempt's lease is lost."""
        return await self.records.submit(record)

    async def _finish_many(
        self, items: list[tuple[int, int, AttemptResult]]
    ) -> list[Finished | JobctlError]:
        riding = [r for i in items if (r := self._riding.pop((i[0], i[1]), None)) is not None]
        if riding and self._rides is not None:  # one op; a success's row written once
            return await asyncio.wrap_future(self._rides.submit_finish_riding(items, riding))
        if self._submits is not None:
            # Queued back to back: the writer takes both into one transaction, in order.
            first = self._submits.submit_record_processes(riding) if riding else None
            done = self._submits.submit_finish_many(items)
            if first is not None:
                await asyncio.wrap_future(first)  # a lost lease: the finish is refused too
            return await asyncio.wrap_future(done)
        if riding:
            await self.run(self.store.record_processes, riding)
        return await self.run(self.store.finish_many, items)

    async def _record_processes(self, records: list[ProcessRecord]) -> list[bool]:
        if self._submits is not None:
            lost = await asyncio.wrap_future(self._submits.submit_record_processes(records))
        else:
            lost = await self.run(self.store.record_processes, records)
        gone = set(lost)
        return [r.job_id not in gone for r in records]

    def close(self) -> None:
        self._pool.shutdown(wait=True)
