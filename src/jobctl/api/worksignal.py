"""How a worker's long-poll (``POST /v1/leases`` with a ``wait``) learns there may be work.

Not a loop over the store: each waiting request sleeps on this signal, which the daemon
has the timer's every tick raise (``daemon.py`` wires ``Timer.on_tick``). A tick follows
each wake-up the timer already gets: an enqueue or replay of due work, a retry's time
coming, a lease running out, a notification from another daemon on the same PostgreSQL
database. A waiter then asks the store once more. ``seq`` closes the gap between a lease
that found nothing and the wait: a tick in between makes the wait return at once.

A wait also ends when its worker hangs up (:class:`Hangup`): a stopping worker half-closes
its connection, a killed one's is closed by the kernel; either way the daemon reads the
end of the request stream, and the long-poll stops waiting and grants nothing more.
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

    async def wait(self, seen: int, timeout: float, hangup: Hangup | None = None) -> None:
        """Return once a tick after ``seen`` happened, after ``timeout`` seconds, or once
        ``hangup`` is seen (the same future is woken by either)."""
        if self.seq != seen or timeout <= 0 or (hangup is not None and hangup.seen):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(fut)
        if hangup is not None:
            hangup.waiters.add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            self._waiters.discard(fut)
            if hangup is not None:
                hangup.waiters.discard(fut)


class Hangup:
    """One connection's peer sent no more (end of stream read): set by the server's
    protocol (api/server.py), read by a long-poll on that connection.

    Why: a worker stopping or killed while its ``POST /v1/leases`` waits must not be
    granted leases it will never see (they would lapse at ``lease_until`` and use an
    attempt). The two cases look the same on the daemon's side (a half-close and a
    close both read as the end of the stream), so the rule is the same: no lease is
    granted after it, and what was claimed but not yet answered is released.
    """

    __slots__ = ("answers", "seen", "waiters")

    def __init__(self) -> None:
        self.seen = False
        #: The request in flight answers after a hang-up (a long-poll sets it): the
        #: connection is then kept open for that answer. Others are closed on at once,
        #: as uvicorn does, so a stream (``logs --follow``) still ends with its reader.
        self.answers = False
        self.waiters: set[asyncio.Future[None]] = set()

    def set(self) -> None:
        """The peer hung up: wake the waits on this connection (the event loop's thread)."""
        self.seen = True
        for fut in self.waiters:
            if not fut.done():
                fut.set_result(None)
        self.waiters.clear()


__all__ = ["Hangup", "WorkSignal"]
