"""Per-owner quotas in the running daemon.

:class:`Quotas` turns a uid into its :class:`~jobctl.domain.quota.Limits` (user name and
groups from the account database, kept for :data:`ACCOUNT_SECONDS` of the injected
clock) and holds the enqueue-rate buckets. Where each quota is enforced:

* ``queued``: in the store, inside the write that inserts the jobs (a group over it is
  refused alone, 429), from the exact per-lane counters in ``job_counts``;
* ``running``: by the dispatcher, in the claim transaction; the owner's due jobs wait;
* ``schedules`` and ``enqueue_rate``: before the write, by the API's admission
  (:class:`jobctl.api.admission.Admission`), with the buckets held here;
* ``log_bytes``: by the kernel, as the command's ``RLIMIT_FSIZE`` (engine/process.py).

The admission also asks the :class:`~jobctl.engine.diskguard.DiskGuard`: below the disk
floor new work is refused (503) before any quota is spent.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Callable
from datetime import datetime, timedelta

from jobctl.domain.clock import Clock
from jobctl.domain.quota import Limits, QuotaPolicy, RateBuckets
from jobctl.errors import QuotaExceeded

#: Seconds a uid's name and groups are trusted before they are looked up again.
ACCOUNT_SECONDS = 60.0
_ACCOUNT = timedelta(seconds=ACCOUNT_SECONDS)


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

    def limits_for(self, uid: int, now: datetime | None = None) -> Limits:
        """The uid's effective quotas (thread-safe: the store's writer calls it too)."""
        if not self.policy.users and not self.policy.groups:
            # nothing to look up: no clock, no cache (the executor asks at every start
            # for the ``log_bytes`` cap; issue 17)
            return self.policy.default
        now = self._clock.now() if now is None else now
        hit = self._cache.get(uid)
        if hit is not None and now - hit[1] < _ACCOUNT:
            return hit[0]
        user, groups = self._lookup(uid)
        limits = self.policy.limits_for(user, groups)
        self._cache[uid] = (limits, now)
        return limits

    def take_enqueue(self, uid: int, n: int, now: datetime | None = None) -> None:
        """Spend ``n`` enqueue tokens of ``uid`` or raise :class:`QuotaExceeded` (429);
        ``now``: the caller's reading of the clock, read once per request."""
        now = self._clock.now() if now is None else now
        limits = self.limits_for(uid, now)
        wait = self._rates.take(uid, n, limits, now)
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


__all__ = ["ACCOUNT_SECONDS", "Quotas", "account"]
