"""Schedule ids: ``sch-`` and 12 hex digits (48 bits), minted in increasing order.

Why not random: the id is the key of two B-trees, the index of ``schedule_defs.id`` and
the clustered ``schedule_cursors`` table. Random keys put every new schedule on a random
page of both: a batch of 1,000 dirtied about 2,000 pages scattered over the file, and
creating 1,000 schedules in a store that held 300,000 took 130 ms against 16 ms with
increasing ids (see docs/benchmarks.md, "Schedules", workload d). Increasing ids land
next to each other, on the few pages the previous batch left in the cache.

Layout: the high 30 bits are the whole seconds of the creating transaction's ``now``
since 2020-01-01 UTC (modulo 2**30: they wrap in 2054, and the collision check below
covers that too), the low 18 bits a counter within the second that starts at a random
point of its lower half. A mint never goes back: when a second's counter runs out
(more than 131,072 schedules in one second) or the clock steps back, it continues from
its last id. Ids are therefore unique within one process by construction; a daemon
restarted within the same second could meet its predecessor's ids, and the insert's
collision check (``store/schedules.py``) then draws the next one. Ids are not secrets:
who may see a schedule is decided by its owner, never by knowing its id.
"""

from __future__ import annotations

import secrets
import threading
from datetime import UTC, datetime

#: The epoch of the seconds in an id.
EPOCH = datetime(2020, 1, 1, tzinfo=UTC)
COUNTER_BITS = 18
ID_BITS = 48
_TIME_MASK = (1 << (ID_BITS - COUNTER_BITS)) - 1


class IdMint:
    """Increasing schedule ids (thread-safe: one mint serves every store of a process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = -1
        self._floor: tuple[datetime | None, int] = (None, 0)  # a batch shares its ``now``

    def next(self, now: datetime) -> str:
        seen, floor = self._floor
        if seen is not now:
            floor = self.floor(now)
            self._floor = (now, floor)
        with self._lock:
            if floor > self._last:  # a new second: start at a random point of its first half
                value = floor + secrets.randbelow(1 << (COUNTER_BITS - 1))
            else:
                value = self._last + 1
            self._last = value = value % (1 << ID_BITS)
        return f"sch-{value:012x}"

    @staticmethod
    def floor(now: datetime) -> int:
        """The smallest id value of the second ``now`` falls in."""
        seconds = int((now - EPOCH).total_seconds()) & _TIME_MASK
        return seconds << COUNTER_BITS


MINT = IdMint()
