"""The admission the API asks before it accepts new work: the disk floor, then quotas.

Lives with the API, its only caller; the daemon (:mod:`jobctl.daemon`) hands it the
engine's disk guard and quota book, typed here by what is asked of them, so the API
needs nothing from the engine.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from jobctl.domain.quota import Limits, over


class DiskFloor(Protocol):
    """The disk guard (:class:`jobctl.engine.diskguard.DiskGuard`)."""

    def check(self, now: datetime | None = None) -> None:
        """Raise ``StorageFull`` below the floor (``now``: the caller's clock reading)."""
        ...

    def info(self) -> dict[str, Any]:
        """The filesystems' free space against the floor, for ``status``."""
        ...

    def close(self) -> None:
        """Let go of the reserve file."""
        ...


class QuotaBook(Protocol):
    """The quotas (:class:`jobctl.engine.quotas.Quotas`)."""

    def limits_for(self, uid: int) -> Limits:
        """The uid's limits."""
        ...

    def take_enqueue(self, uid: int, n: int, now: datetime | None = None) -> None:
        """Spend ``n`` of the uid's enqueue-rate tokens, or raise ``QuotaExceeded``."""
        ...

    def rate_tokens(self, uid: int) -> float | None:
        """The uid's enqueue-rate tokens left, None without a rate."""
        ...


class Admission:
    """What the API asks before it accepts new work; without parts it admits everything."""

    def __init__(self, disk: DiskFloor | None = None, quotas: QuotaBook | None = None) -> None:
        self.disk = disk
        self.quotas = quotas

    def limits_for(self, uid: int) -> Limits:
        return Limits() if self.quotas is None else self.quotas.limits_for(uid)

    def admit_jobs(self, uid: int, n: int, now: datetime | None = None) -> None:
        """Enqueue, replay, trigger: the disk floor, then the enqueue rate. ``now``: the
        request's reading of the clock (one per request, not one per check)."""
        if self.disk is not None:
            self.disk.check(now)
        if self.quotas is not None:
            self.quotas.take_enqueue(uid, n, now)

    def admit_queued(self, uid: int, queued: int, n: int) -> None:
        """Replay and trigger: jobs that skip the store's own ``queued`` check."""
        refusal = over("queued", self.limits_for(uid).queued, queued, n)
        if refusal is not None:
            raise refusal

    def admit_schedule(self, uid: int, schedules: int, adding: int = 1) -> None:
        """Refuse ``adding`` new schedules to ``uid``'s ``schedules`` live ones if the disk
        is low (503) or they would pass the quota (429)."""
        if self.disk is not None:
            self.disk.check()
        refusal = over("schedules", self.limits_for(uid).schedules, schedules, adding)
        if refusal is not None:
            raise refusal

    def usage(self, uid: int, counts: dict[str, int]) -> dict[str, Any]:
        """The uid's usage against each quota, for ``status``."""
        limits = self.limits_for(uid)
        out: dict[str, Any] = {"uid": uid}
        for key in ("queued", "running", "schedules"):
            out[key] = {"used": counts.get(key, 0), "limit": getattr(limits, key)}
        tokens = None if self.quotas is None else self.quotas.rate_tokens(uid)
        out["enqueue_rate"] = {
            "limit": limits.enqueue_rate,
            "burst": None if limits.enqueue_rate is None else int(limits.burst),
            "tokens": None if tokens is None else int(tokens),
        }
        out["log_bytes"] = {"limit": limits.log_bytes}
        return out
