"""Per-owner quotas in the running daemon, and the admission the API asks before new work.

:class:`Quotas` turns a uid into its :class:`~jobctl.domain.quota.Limits` (user name and
groups from the account database, kept for :data:`ACCOUNT_SECONDS` of the injected
clock) and holds the enqueue-rate buckets. Where each quota is enforced:

* ``queued``: in the store, inside the write that inserts the jobs (a group over it is
  refused alone, 429), from the exact per-lane counters in ``job_counts``;
* ``running``: by the dispatcher, in the claim transaction; the owner's due jobs wait;
* ``schedules`` and ``enqueue_rate``: here, before the write (:class:`Admission`);
* ``log_bytes``: by the kernel, as the command's ``RLIMIT_FSIZE`` (engine/process.py).

:class:`Admission` also asks the :class:`~jobctl.engine.diskguard.DiskGuard`: below the disk
floor new work is refused (503) before any quota is spent.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Callable
from datetime import datetime
from typing import Any

from jobctl.domain.clock import Clock
from jobctl.domain.quota import COUNT_RETRY_AFTER, Limits, QuotaPolicy, RateBuckets
from jobctl.engine.diskguard import DiskGuard
from jobctl.errors import QuotaExceeded

#: Seconds a uid's name and groups are trusted before they are looked up again.
ACCOUNT_SECONDS = 60.0


def account(uid: int) -> tuple[str, list[str]]:
    """The user's name and group names (an unknown uid: its number, no groups)."""
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return str(uid), []
    names = []
    for gid in os.getgrouplist(pw.pw_name, pw.pw_gid):
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return pw.pw_name, names


class Quotas:
    def __init__(
        self,
        policy: QuotaPolicy,
        clock: Clock,
        lookup: Callable[[int], tuple[str, list[str]]] = account,
    ) -> None:
        self.policy = policy
        self._clock = clock
        self._lookup = lookup
        self._cache: dict[int, tuple[Limits, datetime]] = {}
        self._rates = RateBuckets()

    def limits_for(self, uid: int) -> Limits:
        """The uid's effective quotas (thread-safe: the store's writer calls it too)."""
        now = self._clock.now()
        hit = self._cache.get(uid)
        if hit is not None and (now - hit[1]).total_seconds() < ACCOUNT_SECONDS:
            return hit[0]
        if not self.policy.users and not self.policy.groups:
            limits = self.policy.default  # nothing to look up
        else:
            user, groups = self._lookup(uid)
            limits = self.policy.limits_for(user, groups)
        self._cache[uid] = (limits, now)
        return limits

    def take_enqueue(self, uid: int, n: int) -> None:
        """Spend ``n`` enqueue tokens of ``uid`` or raise :class:`QuotaExceeded` (429)."""
        limits = self.limits_for(uid)
        wait = self._rates.take(uid, n, limits, self._clock.now())
        if wait > 0:
            raise QuotaExceeded(
                f"enqueue rate quota: at most {limits.enqueue_rate} jobs/s "
                f"(burst {limits.burst:.0f}); try again in {wait:.1f}s",
                quota="enqueue_rate",
                limit=limits.enqueue_rate or 0,
                retry_after=wait,
            )

    def rate_tokens(self, uid: int) -> float | None:
        return self._rates.tokens(uid, self.limits_for(uid), self._clock.now())


def over(quota: str, limit: int | None, have: int, adding: int) -> QuotaExceeded | None:
    """The refusal when ``have + adding`` passes ``limit`` (None: no limit), else None."""
    if limit is None or have + adding <= limit:
        return None
    return QuotaExceeded(
        f"{quota} quota: you have {have} of at most {limit}"
        + (f"; {adding} more would pass it" if adding != 1 else ""),
        quota=quota,
        limit=limit,
        used=have,
        retry_after=COUNT_RETRY_AFTER,
    )


class Admission:
    """What the API asks before it accepts new work; without parts it admits everything."""

    def __init__(self, disk: DiskGuard | None = None, quotas: Quotas | None = None) -> None:
        self.disk = disk
        self.quotas = quotas

    def limits_for(self, uid: int) -> Limits:
        return Limits() if self.quotas is None else self.quotas.limits_for(uid)

    def admit_jobs(self, uid: int, n: int) -> None:
        """Enqueue, replay, trigger: the disk floor, then the enqueue rate."""
        if self.disk is not None:
            self.disk.check()
        if self.quotas is not None:
            self.quotas.take_enqueue(uid, n)

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


__all__ = ["ACCOUNT_SECONDS", "Admission", "Quotas", "account", "over"]
