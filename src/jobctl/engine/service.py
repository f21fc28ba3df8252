"""The shape every background service of the daemon shares (River's Start + runOnce).

A service runs :meth:`Service.run_once` and sleeps until the instant it returns (``None``:
until woken), on the injected clock; :meth:`wake` cuts the sleep short, :meth:`stop` ends
the loop. A failing pass is logged and retried after a second: a broken disk must not
silently kill the timer or the materializer.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from datetime import datetime

from jobctl.domain.clock import Clock
from jobctl.logfmt import logval


class Service(ABC):
    name = "service"

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._wake = asyncio.Event()
        self._stopping = False

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        log = logging.getLogger(f"jobctl.{self.name}")
        while not self._stopping:
            self._wake.clear()
            try:
                deadline = await self.run_once()
            except Exception as exc:
                log.error("event=%s_failed error=%s", self.name, logval(exc))
                await asyncio.sleep(1.0)
                continue
            if not self._stopping:
                await self._clock.sleep_until(deadline, self._wake)

    @abstractmethod
    async def run_once(self) -> datetime | None:
        """One pass; returns when the next pass is due (``None``: only when woken)."""
