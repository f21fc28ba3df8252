"""When an attempt's pid is written (the executor's, engine/executor.py; issue 17).

A command still running after :data:`RECORD_AFTER` has its record written alone; one that
ended sooner has it ride with its finish, in one commit (docs/architecture.md: why it is
safe).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine

from jobctl.domain.models import ProcessRecord
from jobctl.engine import process

#: Seconds a command runs before its pid is recorded alone; one that ends sooner has its
#: record written with its finish, in one commit (docs/architecture.md: why it is safe).
RECORD_AFTER = 0.02


async def record_of(run: process.Running) -> ProcessRecord:
    """The attempt's process record (its start time may still be read on a thread)."""
    c = run.claim
    start = await asyncio.shield(run.start_time)
    return ProcessRecord(c.job.id, c.generation, run.proc.pid, start, str(run.log_path))


class Recorder:
    """When an attempt's pid is written (issue 17: no task and no wait per quick command).

    A command still running after :data:`RECORD_AFTER` has its record written alone, by a
    task the timer starts (the finish waits for it, so the two writes land in order); one
    that ended sooner, most of all one whose exit came with its start's answer, has its
    record ride with the finish, with no timer, task or wait made for it.
    """

    def __init__(
        self,
        run: process.Running,
        loop: asyncio.AbstractEventLoop,
        alone: Callable[[process.Running], Coroutine[None, None, ProcessRecord | None]],
    ) -> None:
        self._run, self._loop, self._alone = run, loop, alone
        self._task: asyncio.Task[ProcessRecord | None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        if not run.exited.done():
            self._timer = loop.call_later(RECORD_AFTER, self._due)

    def _due(self) -> None:
        self._timer = None
        if not self._run.exited.done():
            self._task = self._loop.create_task(self._alone(self._run))

    async def result(self) -> ProcessRecord | None:
        """Once the command ended: its record to ride with the finish, or None when it was
        written alone (after that write's commit)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            return await self._task
        return await record_of(self._run)

    def cancel(self) -> None:
        """The attempt's task is being cancelled (or failed): nothing more is written."""
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()
