"""The reaper: prunes finished jobs and audit records past their retention ages, then
checkpoints the WAL.

Runs at start-up and then every ``every`` seconds. It deletes in batches of
``PRUNE_BATCH`` jobs, each its own short transaction queued behind dispatch work, so a
backlog of a million old jobs drains without ever holding the writer for long. Attempt
log files are unlinked after their rows are gone (a crash in between leaves stray files,
never rows pointing at missing files).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from datetime import datetime, timedelta

from jobctl.domain.clock import Clock
from jobctl.domain.retention import DEFAULT_AUDIT_RETENTION, cutoffs
from jobctl.engine.service import Service
from jobctl.store.aio import AsyncStore
from jobctl.store.audit import PRUNE_AUDIT_BATCH
from jobctl.store.retention import PRUNE_BATCH

log = logging.getLogger("jobctl.reaper")


class Reaper(Service):
    name = "reaper"

    def __init__(
        self,
        store: AsyncStore,
        clock: Clock,
        retention: Mapping[str, float],
        every: float = 3600.0,
        audit_retention: float = DEFAULT_AUDIT_RETENTION,
    ) -> None:
        super().__init__(clock)
        self._store = store
        self.retention = dict(retention)
        self.audit_retention = audit_retention
        self._every = every
        self.pruned_total = 0

    async def run_once(self) -> datetime | None:
        """Prune now; the next pass is ``every`` seconds later."""
        await self.prune_audit_now()
        await self.prune_now()
        return self._clock.now() + timedelta(seconds=self._every)

    async def prune_audit_now(self) -> int:
        """Delete audit records older than ``audit_retention``; return how many went."""
        total = 0
        before = self._clock.now() - timedelta(seconds=self.audit_retention)
        while not self._stopping:
            done = await self._store.run(self._store.store.prune_audit, before, PRUNE_AUDIT_BATCH)
            total += done
            if done < PRUNE_AUDIT_BATCH:
                break
        if total:
            log.info("event=pruned_audit records=%d", total)
        return total

    async def prune_now(self) -> int:
        """Prune everything past retention now; return how many jobs went."""
        total = 0
        while not self._stopping:
            limits = cutoffs(self.retention, self._clock.now())
            done = await self._store.run(self._store.store.prune, limits, PRUNE_BATCH)
            await asyncio.to_thread(_unlink, done.log_files)
            total += done.total
            if done.total < PRUNE_BATCH:
                break
        if total:
            self.pruned_total += total
            log.info("event=pruned jobs=%d", total)
        await self._store.run(self._store.store.checkpoint)
        return total


def _unlink(paths: tuple[str, ...]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
