"""The daemons sharing one database (PostgreSQL): what each says of itself in its
heartbeat, and when the others count it gone.

A daemon writes its row at start and again every ``lease_ttl / 3`` seconds (the
heartbeat of its leases); one not seen for :data:`GONE_AFTER_TTLS` lease TTLs is shown
as gone: by then every lease it held has expired and another daemon may reclaim its jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

#: A daemon not seen for this many of its lease TTLs is gone.
GONE_AFTER_TTLS = 3


@dataclass(frozen=True)
class DaemonBeat:
    """One daemon's row: its lease owner id (``host:pid:tag``) and what it reports."""

    owner: str
    host: str
    pid: int
    version: str
    started_at: datetime
    last_seen: datetime
    running: int
    slots: int
    lease_ttl: float
    stopped_at: datetime | None = None

    def state(self, now: datetime) -> str:
        """``live``, ``stopped`` (said so itself) or ``gone`` (silent for 3 lease TTLs)."""
        if self.stopped_at is not None:
            return "stopped"
        silent = now - self.last_seen
        return "gone" if silent > timedelta(seconds=GONE_AFTER_TTLS * self.lease_ttl) else "live"


__all__ = ["GONE_AFTER_TTLS", "DaemonBeat"]
