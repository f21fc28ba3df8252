"""Per-owner quotas: what one user may hold and do at once. Pure.

A :class:`Limits` is one user's effective quotas; ``None`` means no limit. The daemon's
configuration gives defaults (``[quota]``) and overrides per user (``[quota.user.NAME]``)
and per group (``[quota.group.NAME]``). :meth:`QuotaPolicy.limits_for` resolves them,
most specific first: a user's own override, else the most generous value any of the
user's groups sets, else the default. 0 in the configuration means "no limit".

:class:`RateBuckets` is the per-uid token bucket of the enqueue rate; it takes ``now``
from its caller (the injected clock), like everything in ``domain``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import TYPE_CHECKING

from jobctl.errors import JobctlError, QuotaExceeded

if TYPE_CHECKING:
    from jobctl.domain.models import JobSpec

#: The quota keys, in the order the docs and ``jobctl status`` list them.
QUOTA_KEYS = ("queued", "schedules", "running", "enqueue_rate", "enqueue_burst", "log_bytes")
#: Seconds a caller over a count quota (queued, schedules) is told to wait.
COUNT_RETRY_AFTER = 10


@dataclass(frozen=True, slots=True)
class Limits:
    """One user's quotas; None: unlimited."""

    queued: int | None = None  # scheduled jobs (waiting or due) the user may hold
    schedules: int | None = None  # live schedules
    running: int | None = None  # jobs of the user running at once (the dispatcher holds)
    enqueue_rate: int | None = None  # jobs per second through the API (token bucket)
    enqueue_burst: int | None = None  # the bucket's size; None: max(rate, 10,000)
    log_bytes: int | None = None  # bytes of output one attempt may write

    @property
    def burst(self) -> float:
        if self.enqueue_rate is None:
            return math.inf
        return float(self.enqueue_burst or max(self.enqueue_rate, 10_000))

    def as_dict(self) -> dict[str, int | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


UNLIMITED = Limits()


def limits_from(values: Mapping[str, int]) -> dict[str, int | None]:
    """Configured numbers to :class:`Limits` fields: 0 means no limit."""
    return {k: (None if v == 0 else v) for k, v in values.items()}


@dataclass(frozen=True)
class QuotaPolicy:
    """Defaults and overrides, as configured."""

    default: Limits = UNLIMITED
    users: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    groups: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def limits_for(self, user: str, groups: Sequence[str]) -> Limits:
        """The user's own override, else the most generous group value, else the default."""
        chosen: dict[str, int | None] = {}
        for name in groups:
            for key, value in limits_from(self.groups.get(name, {})).items():
                if key not in chosen or _more(value, chosen[key]):
                    chosen[key] = value
        chosen.update(limits_from(self.users.get(user, {})))
        return replace(self.default, **chosen) if chosen else self.default


def _more(a: int | None, b: int | None) -> bool:
    """Whether limit ``a`` allows more than ``b`` (None: unlimited)."""
    if a is None:
        return b is not None
    return b is not None and a > b


class RateBuckets:
    """Token buckets per uid: ``take`` spends tokens or says how long until there are."""

    def __init__(self) -> None:
        self._buckets: dict[int, tuple[float, datetime]] = {}

    def take(self, uid: int, n: int, limits: Limits, now: datetime) -> float:
        """Spend ``n`` tokens and return 0, or spend nothing and return the seconds to wait.

        A request larger than the bucket could ever hold waits for a full bucket and then
        takes it (so one huge batch is slowed, never refused for good).
        """
        rate = limits.enqueue_rate
        if rate is None:
            return 0.0
        burst = limits.burst
        tokens, at = self._buckets.get(uid, (burst, now))
        tokens = min(burst, tokens + max(0.0, (now - at).total_seconds()) * rate)
        need = min(float(n), burst)
        if tokens + 1e-9 >= need:
            self._buckets[uid] = (tokens - need, now)
            return 0.0
        self._buckets[uid] = (tokens, now)
        return (need - tokens) / rate

    def tokens(self, uid: int, limits: Limits, now: datetime) -> float | None:
        """Tokens the uid has now (None: no rate limit)."""
        if limits.enqueue_rate is None:
            return None
        tokens, at = self._buckets.get(uid, (limits.burst, now))
        elapsed = max(0.0, (now - at).total_seconds())
        return min(limits.burst, tokens + elapsed * limits.enqueue_rate)


__all__ = [
    "COUNT_RETRY_AFTER",
    "QUOTA_KEYS",
    "UNLIMITED",
    "Limits",
    "QuotaPolicy",
    "RateBuckets",
    "limits_from",
    "refuse_over",
]


_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "kb": 1000, "m": 1024**2, "mib": 1024**2,
          "mb": 1000**2, "g": 1024**3, "gib": 1024**3, "gb": 1000**3, "t": 1024**4,
          "tib": 1024**4, "tb": 1000**4}  # fmt: skip


def parse_size(text: str) -> int:
    """``"256MiB"``, ``"1G"``, ``"4096"`` to bytes (K, M, G, T are powers of 1024)."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m[2].lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r}")
    return int(float(m[1]) * _UNITS[m[2].lower()])


def format_size(n: int) -> str:
    """Bytes in the largest binary unit that divides them (``"256MiB"``), else bytes."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


@dataclass(frozen=True, slots=True)
class DiskFloor:
    """Free space below which new work is refused: a size, a share of the filesystem, or
    both (then the smaller of the two applies, so a small filesystem is not always
    "full" and a big one does not keep gigabytes idle). Nothing set: no floor."""

    size: int | None = None
    percent: float | None = None

    def bytes_for(self, total: int) -> int:
        """The floor in bytes on a filesystem of ``total`` bytes."""
        candidates = []
        if self.size is not None:
            candidates.append(self.size)
        if self.percent is not None:
            candidates.append(int(total * self.percent / 100))
        return min(candidates) if candidates else 0

    def __str__(self) -> str:
        parts = [format_size(self.size)] if self.size is not None else []
        if self.percent is not None:
            parts.append(f"{self.percent:g}%")
        return ",".join(parts) or "0"

    @classmethod
    def parse(cls, text: str) -> DiskFloor:
        """``"256MiB"``, ``"5%"``, ``"256MiB,5%"`` (the smaller applies) or ``"0"`` (off)."""
        size, percent = None, None
        for part in (p.strip() for p in text.split(",")):
            if part.endswith("%"):
                value = float(part[:-1])
                if not 0 <= value <= 100 or percent is not None:
                    raise ValueError(f"bad percentage {part!r}")
                percent = value
            elif size is None:
                size = parse_size(part)
            else:
                raise ValueError("at most one size")
        if size == 0 and percent is None:
            return cls()
        return cls(size, percent)


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


def refuse_over(
    groups: Sequence[Sequence[JobSpec]], limited: Mapping[int, int], have: Mapping[int, int]
) -> dict[int, JobctlError]:
    """Insert groups (by index) that would take their owner past the ``queued`` quota
    ``limited`` (per owner), from ``have`` jobs scheduled: groups are admitted in order,
    so of one owner's groups the first ones fit. One rule for both backends, which only
    count ``have`` their own way."""
    have = dict(have)
    refused: dict[int, JobctlError] = {}
    for i, group in enumerate(groups):
        adding: dict[int, int] = {}
        for spec in group:
            if spec.owner_uid in limited:
                adding[spec.owner_uid] = adding.get(spec.owner_uid, 0) + 1
        over = [uid for uid, n in adding.items() if have[uid] + n > limited[uid]]
        if over:
            uid = over[0]
            refused[i] = QuotaExceeded(
                f"queued quota: you have {have[uid]} scheduled jobs of at most "
                f"{limited[uid]}; {adding[uid]} more would pass it",
                quota="queued",
                limit=limited[uid],
                used=have[uid],
                retry_after=COUNT_RETRY_AFTER,
            )
            continue
        for uid, n in adding.items():
            have[uid] += n
    return refused
