"""Awaitable access to a synchronous store for the daemon's event loop.

Store calls block (on disk, on a group commit) so they run on a dedicated thread pool,
wide enough that many concurrent API requests wait on one group commit together instead
of queueing behind each other.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from jobctl.store.base import Store

P = ParamSpec("P")
T = TypeVar("T")


class AsyncStore:
    def __init__(self, store: Store, threads: int = 64) -> None:
        self.store = store
        self.clock = store.clock
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="jobctl-store")

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
