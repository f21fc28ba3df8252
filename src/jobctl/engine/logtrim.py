"""The executor's trim loop: every quarter second, cut the middle of live logs near their cap.

The cut itself is :func:`jobctl.engine.logcap.trim` (why and how: that module). The loop
runs only while attempts whose owner has a ``log_bytes`` cap run: an idle daemon does not
wake for it. An attempt that ends waits for a cut under way (:meth:`Trimmer.settled`)
before it reads its log's tail and size.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta

from jobctl.domain.clock import Clock
from jobctl.engine import logcap
from jobctl.engine.process import Running
from jobctl.logfmt import logval

log = logging.getLogger("jobctl.executor")  # the executor's lines, wherever they are written


class Trimmer:
    def __init__(
        self,
        clock: Clock,
        live: Callable[[], list[Running]],
        idle: Callable[[], bool],
        wake: asyncio.Event,
    ) -> None:
        """``live``: the running attempts; ``idle``: True when the loop may end (no task
        left, or stopping); ``wake``: set at shutdown, cuts the loop's wait short."""
        self._clock = clock
        self._live = live
        self._idle = idle
        self._wake = wake
        self._task: asyncio.Task[None] | None = None
        self._trimming: asyncio.Future[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def settled(self) -> None:
        """Wait for a cut under way (it may be of the caller's log)."""
        if self._trimming is not None:
            await asyncio.shield(self._trimming)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            await self._clock.sleep_until(
                self._clock.now() + timedelta(seconds=logcap.TRIM_EVERY), self._wake
            )
            runs = [r for r in self._live() if r.log_cap is not None and not r.trim_off]
            if runs:
                self._trimming = asyncio.ensure_future(asyncio.to_thread(_trim_all, runs))
                await self._trimming
                self._trimming = None
            if self._idle():
                return


def _trim_all(runs: list[Running]) -> None:
    for run in runs:
        try:
            logcap.trim(run)
        except OSError as exc:  # gone, or the disk: the head is kept at least
            log.warning("event=log_trim_failed job=%s error=%s", run.claim.job.id, logval(exc))
