"""Hands attempts' results to the store, fenced by the claim's generation, and never drops one.

The executor's finish path (engine/executor.py): a result is written with the generation of
the claim it belongs to; a stale one is refused by the store (the fence) and only logged and
counted. A store that cannot write (a full disk, an I/O error) is waited out with backoff;
only a daemon that is stopping gives a result up (the job is then reclaimed at the next
start, like after a crash).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from datetime import timedelta

from jobctl.domain.clock import Clock
from jobctl.domain.models import AttemptResult, Claim, Job, ProcessRecord
from jobctl.domain.states import JobStatus
from jobctl.engine import results
from jobctl.engine.leasewatch import LeaseWatch
from jobctl.errors import (
    JobctlError,
    LeaseLost,
    NotFound,
    StoreCorrupt,
    StoreUnavailable,
    Unavailable,
)
from jobctl.logfmt import logval
from jobctl.metrics import Metrics
from jobctl.store.aio import AsyncStore

log = logging.getLogger("jobctl.executor")  # the executor's lines, wherever they are written
#: Seconds between tries of a finish the store could not write; the last one repeats.
FINISH_BACKOFF = (0.1, 0.5, 1.0, 2.0, 5.0)


class Reporter:
    """The fenced finish of the executor's attempts, and which leases were found lost."""

    def __init__(
        self,
        store: AsyncStore,
        clock: Clock,
        metrics: Metrics,
        watch: LeaseWatch | None,
        on_store_full: Callable[[], bool],
    ) -> None:
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._watch = watch
        self._on_store_full = on_store_full
        self.lost: dict[int, str] = {}  # job id -> the store call that first found it lost
        self.closing = False  # stopping: a finish the store cannot write is given up
        self.closed = asyncio.Event()  # cuts a finish retry's wait short at shutdown

    def close(self) -> None:
        self.closing = True
        self.closed.set()

    async def report(
        self, claim: Claim, result: AttemptResult, record: ProcessRecord | None = None
    ) -> Job | None:
        """Hand the result to the store (batched with other finishes); returns only after
        the commit. None when it was fenced or refused for good.

        A store that cannot write (a full disk, an I/O error) is waited out: the result is
        kept and sent again with backoff until it lands, never dropped, so the job does
        not stay ``running`` once the disk has room again. Only a daemon that is stopping
        gives up (the job is then reclaimed at the next start, like after a crash).
        """
        job_id = claim.job.id
        released = False  # the disk reserve was given up for this finish (once at most)
        unsure = False  # a try failed: its commit may have landed all the same
        for attempt in itertools.count():
            try:
                done = await self._store.finish(job_id, claim.generation, result, record)
            except (LeaseLost, NotFound) as exc:
                landed = await self._landed(claim, result) if unsure else None
                if landed is not None:
                    results.log_finished(landed, claim, result)
                    return landed
                await self._refused(claim, result, str(exc))
                return None
            except StoreCorrupt:  # logged once by the store; the job runs again after repair
                return None
            except Unavailable as exc:  # the disk: keep the result, try again
                # (the database server away is no full disk: the reserve stays)
                disk = not isinstance(exc, StoreUnavailable)
                if disk and not released and self._on_store_full():
                    released = True
                    continue  # the reserve was given up for this: try again at once
                unsure = True
                if not await self._retry_finish(job_id, attempt, exc):
                    return None
                continue
            except JobctlError as exc:  # a logic refusal: trying again cannot help
                log.error("event=finish_refused job=%s error=%s", job_id, logval(exc))
                return None
            except Exception as exc:  # the store is failing: keep the result, try again
                unsure = True
                if not await self._retry_finish(job_id, attempt, exc):
                    return None
                continue
            job = results.after(claim, result, done)
            results.log_finished(job, claim, result)
            return job
        return None  # pragma: no cover - the loop only ends by returning

    async def _landed(self, claim: Claim, result: AttemptResult) -> Job | None:
        """The job, if an earlier try of this finish committed although it was answered
        with an error (the database went away during its ``COMMIT``): the claim's attempt
        ended with this very result. Its resend was then refused by the fence, which must
        not count it as a lost lease nor keep the job from the failure notifier."""
        try:
            job = await self._store.run(self._store.store.get, claim.job.id)
        except Exception:  # gone (purged) or unreadable: refused as any other
            return None
        mine = [a for a in job.attempts if a.generation == claim.generation]
        ended = mine[-1] if mine else None
        if ended is None or ended.finished_at is None:
            return None
        if (ended.outcome, ended.exit_code) != (result.outcome, result.exit_code):
            return None  # ended otherwise (a cancel's stop, a reclaim): refused as it was
        log.info("event=finish_landed job=%s gen=%s", claim.job.id, claim.generation)
        return job

    async def _retry_finish(self, job_id: int, attempt: int, exc: Exception) -> bool:
        """Wait before sending a finish again; False when the daemon is stopping."""
        if self.closing:
            log.error("event=finish_abandoned job=%s error=%s", job_id, logval(exc))
            return False
        delay = FINISH_BACKOFF[min(attempt, len(FINISH_BACKOFF) - 1)]
        level = logging.WARNING if attempt < len(FINISH_BACKOFF) else logging.DEBUG
        log.log(level, "event=finish_retry job=%s attempt=%s error=%s", job_id, attempt + 1,
                logval(exc))  # fmt: skip
        # On the injected clock, like every wait of the engine (tests move it).
        await self._clock.sleep_until(self._clock.now() + timedelta(seconds=delay), self.closed)
        return True

    def lease_lost(self, op: str, job_id: int, gen: int, reason: str) -> None:
        """The store refused a heartbeat or pid record: the command is stopped next; the
        attempt is counted once, when its result is refused too (see :meth:`_refused`)."""
        self.lost.setdefault(job_id, op)
        if self._watch is not None:  # being stopped already: nothing left to give up
            self._watch.done(job_id)
        log.warning(
            "event=lease_lost job=%s gen=%s op=%s reason=%s", job_id, gen, op, logval(reason)
        )

    async def _refused(self, claim: Claim, result: AttemptResult, reason: str) -> None:
        """The store refused the result: a user's cancel of the running job, or the fence.

        Both raise LeaseLost; only the job's row tells them apart (cancelled at our very
        generation). The extra read happens on this rare path only, and keeps cancels out
        of ``jobctl_fencing_rejections_total``, whose every increment should mean a lost
        lease worth a look.
        """
        job_id, gen = claim.job.id, claim.generation
        op = self.lost.pop(job_id, "finish")
        try:
            now = await self._store.run(self._store.store.get, job_id)
        except Exception:  # gone (purged) or unreadable: the result was refused all the same
            now = None
        if now is not None and now.status is JobStatus.CANCELLED and now.generation == gen:
            log.info(
                "event=cancelled job=%s attempt=%s outcome=%s exit=%s",
                job_id,
                claim.attempt,
                result.outcome.value,
                result.exit_code,
            )
            return
        self._metrics.fencing_rejections.labels(op).inc()
        log.warning(
            "event=fenced job=%s gen=%s op=%s outcome=%s reason=%s",
            job_id,
            gen,
            op,
            result.outcome.value,
            logval(reason),
        )
