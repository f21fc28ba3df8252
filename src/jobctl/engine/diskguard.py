"""Backpressure on disk space: below a free-space floor, new work waits.

The database and the attempt logs may live on one filesystem or two; each is measured
with ``statvfs`` (space an unprivileged writer may use, ``f_bavail``) and compared with
the configured floor (:class:`jobctl.domain.quota.DiskFloor`). A measurement is kept for
:data:`CACHE_SECONDS` of the injected clock, so a busy enqueue path pays for one
``statvfs`` a second, not one per request.

Below the floor the API refuses new work (enqueue, schedule create, replay, trigger)
with 503 ``disk_low`` and ``Retry-After``, and the timer starts no queued job; running
jobs go on, and the floor is what is left for their finishes, heartbeats and logs (each
log bounded by the ``log_bytes`` quota). Everything resumes by itself once space is back
above the floor: nothing latches.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from jobctl.domain.clock import Clock
from jobctl.domain.quota import DiskFloor, format_size
from jobctl.errors import DiskLow

log = logging.getLogger("jobctl.disk")
CACHE_SECONDS = 1.0
_CACHE = timedelta(seconds=CACHE_SECONDS)
#: The reserve file's size: half the floor, at most this.
RESERVE_MAX = 16 * 1024 * 1024
#: Seconds a caller refused for disk space is told to wait.
RETRY_AFTER = 5


@dataclass(frozen=True, slots=True)
class DiskState:
    """One filesystem's free space against its floor."""

    path: str
    free: int
    total: int
    floor: int
    #: Bytes of the reserve file given up and not yet taken back: not counted as free.
    owed: int = 0

    @property
    def low(self) -> bool:
        return self.free - self.owed < self.floor

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "free_bytes": self.free,
            "total_bytes": self.total,
            "floor_bytes": self.floor,
            "reserve_released_bytes": self.owed,
            "low": self.low,
        }


def _statvfs(path: str) -> tuple[int, int, int]:
    """(device, free bytes for unprivileged writers, size) of the filesystem of ``path``."""
    st = os.statvfs(path)
    return os.stat(path).st_dev, st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


class DiskGuard:
    """Measures the filesystems of ``paths`` (deduplicated) against ``floor``."""

    def __init__(
        self,
        paths: Sequence[Path],
        floor: DiskFloor,
        clock: Clock,
        measure: Callable[[str], tuple[int, int, int]] = _statvfs,
        reserve: Path | None = None,
    ) -> None:
        self._paths = [str(p) for p in paths]
        self.floor = floor
        self._clock = clock
        self._measure = measure
        self._at: datetime | None = None
        self._states: list[DiskState] = []
        self._low: DiskState | None = None  # the first of _states below its floor
        self._was_low = False
        #: A preallocated file on the first path's filesystem (the database's), given up
        #: when a finish meets a full disk so that it fits (:meth:`release_reserve`).
        self._reserve = reserve
        self._owed = 0  # its size while released and not yet made again

    @property
    def enabled(self) -> bool:
        return self.floor.size is not None or self.floor.percent is not None

    def states(self, now: datetime | None = None) -> list[DiskState]:
        """The filesystems now (measured at most once per :data:`CACHE_SECONDS`);
        ``now``: the caller's reading of the clock, if it has one."""
        now = self._clock.now() if now is None else now
        if self._at is None or now - self._at >= _CACHE:
            self._states = self._measure_all()
            self._low = next((s for s in self._states if s.low), None)
            self._at = now
            self._note_change()
        return self._states

    def _measure_all(self) -> list[DiskState]:
        seen: set[int] = set()
        out = []
        for path in self._paths:
            try:
                dev, free, total = self._measure(path)
            except OSError:
                continue  # not created yet (the logs' directory): nothing to guard there
            if dev in seen:
                continue
            state = DiskState(path, free, total, self.floor.bytes_for(total))
            if not seen:  # the database's filesystem holds the reserve
                state = self._keep_reserve(state)
            seen.add(dev)
            out.append(state)
        return out

    def _keep_reserve(self, state: DiskState) -> DiskState:
        """Make the reserve file when there is room for it above the floor; a released one
        is owed (not counted as free) until it is made again."""
        size = min(RESERVE_MAX, state.floor // 2)
        if self._reserve is None or size <= 0 or not self.enabled:
            return state
        if self._reserve.exists():
            self._owed = 0
            return state
        if state.free - size >= state.floor and _preallocate(self._reserve, size):
            if self._owed:
                log.info("event=disk_reserve_restored bytes=%d", size)
            self._owed = 0
            return DiskState(state.path, state.free - size, state.total, state.floor)
        return DiskState(state.path, state.free, state.total, state.floor, self._owed)

    def close(self) -> None:
        """The daemon stops: hand the reserve back to the filesystem (made again at start)."""
        if self._reserve is not None and self._reserve.exists():
            self._reserve.unlink(missing_ok=True)

    def release_reserve(self) -> bool:
        """Give the reserve's space to the writes that must land (a finish met a full disk).

        Below the floor no new work is admitted and no queued job starts, so what it frees
        goes to finishes and heartbeats. False if there was none to give."""
        if self._reserve is None:
            return False
        try:
            size = self._reserve.stat().st_size
            self._reserve.unlink()
        except OSError:
            return False
        self._owed = size
        self._at = None  # measure again at the next look
        log.warning("event=disk_reserve_released bytes=%d", size)
        return True

    def _note_change(self) -> None:
        low = [s for s in self._states if s.low]
        if bool(low) != self._was_low:
            self._was_low = bool(low)
            if low:
                log.warning("event=disk_low %s", _describe(low[0]))
            else:
                log.info("event=disk_ok")

    def low(self, now: datetime | None = None) -> DiskState | None:
        """The first filesystem below its floor, or None (kept with the measurement: this
        is asked on every enqueue)."""
        if not self.enabled:
            return None
        self.states(now)
        return self._low

    def check(self, now: datetime | None = None) -> None:
        """Raise :class:`DiskLow` (503, ``Retry-After``) while a filesystem is below the floor."""
        state = self.low(now)
        if state is not None:
            raise DiskLow(
                f"not accepting new work: {_describe(state)}; running jobs go on, "
                f"try again when space is freed",
                retry_after=RETRY_AFTER,
                free_bytes=state.free,
                floor_bytes=state.floor,
            )

    def info(self) -> dict[str, Any]:
        """What ``status`` shows: each filesystem, the floor, and whether work is refused."""
        states = self.states() if self.enabled else []
        return {
            "floor": str(self.floor),
            "refusing": any(s.low for s in states),
            "filesystems": [s.as_dict() for s in states],
        }


def _preallocate(path: Path, size: int) -> bool:
    """Create ``path`` holding ``size`` bytes of real disk blocks; False if it cannot."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        log.warning("event=disk_reserve_failed error=%s", exc)
        os.close(fd)
        path.unlink(missing_ok=True)
        return False
    os.close(fd)
    return True


def _describe(state: DiskState) -> str:
    return (
        f"{format_size_approx(state.free)} free on the filesystem of {state.path}, "
        f"below the floor of {format_size_approx(state.floor)}"
    )


def format_size_approx(n: int) -> str:
    """Bytes for people: ``"12.3 MiB"``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return format_size(n)  # pragma: no cover


__all__ = ["CACHE_SECONDS", "DiskGuard", "DiskState", "format_size_approx"]
