"""How a worker's long-poll (``POST /v1/leases`` with a ``wait``) learns there may be work.

Not a loop over the store: each waiting request sleeps on this signal, which the daemon
has the timer's every tick raise (``daemon.py`` wires ``Timer.on_tick``). A tick follows
each wake-up the timer already gets: an enqueue or replay of due work, a retry's time
coming, a lease running out, a notification from another daemon on the same PostgreSQL
database. A waiter then asks the store once more. ``seq`` closes the gap between a lease
that found nothing and the wait: a tick in between makes the wait return at once.
"""

from __future__ import annotations

import asyncio


class WorkSignal:
    """A counter of ticks that waiters can sleep on (one event loop's)."""

    def __init__(self) -> None:
        self.seq = 0
        self._waiters: set[asyncio.Future[None]] = set()

    def notify(self) -> None:
        """Wake every waiter (called on the event loop's thread)."""
        self.seq += 1
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    async def wait(self, seen: int, timeout: float) -> None:
        """Return once a tick after ``seen`` happened, or after ``timeout`` seconds."""
        if self.seq != seen or timeout <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            self._waiters.discard(fut)


__all__ = ["WorkSignal"]
