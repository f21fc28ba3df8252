"""The database server's clock as the authority for every daemon on one database.

Leases and due times are compared across hosts, so they must not depend on the hosts'
clocks agreeing. Each daemon measures its offset to the server's ``clock_timestamp()``
(:func:`measure_offset`: the server's time against the midpoint of the local round trip)
and wraps its clock in a :class:`ServerClock` that applies it; re-measuring replaces the
offset. An offset above :data:`WARN_OFFSET` is logged as a warning: it is corrected, but a
host that far off usually has other problems.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from jobctl.domain.clock import Clock
from jobctl.store.pg.db import PgConn, PgDb

log = logging.getLogger("jobctl.store")
#: Seconds of offset to the database server above which a warning is logged.
WARN_OFFSET = 5.0


def measure_offset(db: PgDb, conn: PgConn, local: Clock) -> float:
    """Seconds to add to ``local.now()`` to get the server's ``clock_timestamp()``."""
    before = local.now()
    row = conn.execute(db.q("server_time")).fetchone()
    after = local.now()
    if row is None:
        raise AssertionError("SELECT clock_timestamp() returned no row")
    server: datetime = row["t"]
    return (server - (before + (after - before) / 2)).total_seconds()


class ServerClock:
    """``local`` moved by the offset to the database server (a :class:`Clock`)."""

    def __init__(self, local: Clock, offset: float = 0.0) -> None:
        self.local = local
        self.offset = offset

    @property
    def offset(self) -> float:
        """Seconds added to the local clock."""
        return self._delta.total_seconds()

    @offset.setter
    def offset(self, seconds: float) -> None:
        self._delta = timedelta(seconds=seconds)  # once, not per now(): it is read per request

    def now(self) -> datetime:
        return self.local.now() + self._delta

    async def sleep_until(self, deadline: datetime | None, wake: asyncio.Event) -> None:
        local = None if deadline is None else deadline - self._delta
        await self.local.sleep_until(local, wake)

    def remeasure(self, db: PgDb) -> float:
        """Measure the offset again, apply it and log it (a warning above 5 s)."""
        offset = db.read(lambda conn: measure_offset(db, conn, self.local))
        self.offset = offset
        level = logging.WARNING if abs(offset) > WARN_OFFSET else logging.INFO
        log.log(level, "event=clock_offset seconds=%.3f warn_above=%.0f", offset, WARN_OFFSET)
        return offset


__all__ = ["WARN_OFFSET", "ServerClock", "measure_offset"]
