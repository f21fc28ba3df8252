"""Answers that hold for one turn of the event loop (issue 17).

A burst starts many attempts of one owner in the same loop turn (the exits of one spawn
helper message free their slots together, a claim brings several jobs). Each start asks
the system the same questions: may the owner still run (``Access.run_refusal``: four
``stat`` calls) and what are their groups (``os.getgrouplist``: ``/etc/group`` read and
every NSS module asked). For another user's jobs the two were a third of the loop's
samples; asked once per turn, the loop's CPU per job fell by 32% (docs/benchmarks.md,
"Another user's jobs on the loop").

Nothing runs on the loop between the starts of one turn, so they read the system at
the same instant as far as the daemon can tell: the answer is never older than the turn
it was asked in. A :class:`TurnMemo` is emptied by a callback scheduled when its first
answer of a turn is stored; used outside a running loop (or from another loop than the
one it was filled on), it remembers nothing from before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["TurnMemo"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TurnMemo(Generic[K, V]):
    """``compute(key)``, remembered until the event loop's next turn."""

    def __init__(self, compute: Callable[[K], V]) -> None:
        self._compute = compute
        self._values: dict[K, V] = {}
        #: The loop whose turn :attr:`_values` belong to (emptied by its next turn).
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self, key: K) -> V:
        """The answer for ``key`` of this turn: computed now if it is the first ask."""
        loop = asyncio._get_running_loop()
        if loop is None:  # no turn to hold it for
            return self._compute(key)
        if loop is self._loop:
            try:
                return self._values[key]
            except KeyError:
                pass
        value = self._compute(key)
        if loop is not self._loop or not self._values:
            self._values.clear()  # another loop's (one that stopped before emptying it)
            self._loop = loop
            loop.call_soon(self._values.clear)
        self._values[key] = value
        return value

    def forget(self) -> None:
        """Drop this turn's answers (a caller that changed what they depend on)."""
        self._values.clear()
