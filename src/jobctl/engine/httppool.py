"""Connections of webhook requests: one small httpx client per connection, per target.

httpx's pool (httpcore) scans every connection it holds on every request (``has_expired``:
a readability poll and a ``getpeername`` each), so one shared pool's cost per request grows
with the connections open: at 32 connections it was most of a delivery's CPU time. Here
each target (host, port and the pinned address) has its own free list of clients, each
client holding at most one connection, so that scan is one connection long. A request
takes a free client of its target (or makes one) and gives it back when its answer is read:
the per-target limit (``http_per_target``, held by the caller) bounds the clients of a
target in use at once, and so the connections. Every client is made alike: no redirect
followed, no proxy from the environment, the configured timeouts, and one shared TLS
context (httpx's default: certificates checked against certifi's roots; making one per
client cost more than the request).

Targets are kept in least-recently-used order; past :data:`MAX_IDLE` idle clients in all
(the shared pool's bound on kept-alive connections before), the least recently used
targets' idle clients are closed.
"""

from __future__ import annotations

import ssl
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from jobctl.domain.netguard import Address

USER_AGENT = "jobctl-webhook/1"
#: Idle clients (so kept-alive connections) in all targets.
MAX_IDLE = 256
Target = tuple[str, int, Address]


class TargetPools:
    """Free clients per target; see the module docstring."""

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._free: OrderedDict[Target, list[httpx.AsyncClient]] = OrderedDict()
        self._busy: set[httpx.AsyncClient] = set()
        self._idle = 0
        self._tls: ssl.SSLContext | None = None

    def _make(self) -> httpx.AsyncClient:
        if self._tls is None:
            self._tls = httpx.create_ssl_context()
        return httpx.AsyncClient(
            verify=self._tls,
            follow_redirects=False,
            trust_env=False,  # no proxy from the environment: the guard decides
            timeout=self._timeout,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            headers={"user-agent": USER_AGENT},
        )

    @asynccontextmanager
    async def client(self, target: Target) -> AsyncIterator[httpx.AsyncClient]:
        """A client of ``target`` of its own while the block runs."""
        free = self._free.pop(target, None) or []
        self._free[target] = free  # the most recently used last
        if free:
            client = free.pop()
            self._idle -= 1
        else:
            client = self._make()
        self._busy.add(client)
        try:
            yield client
        finally:
            self._busy.discard(client)
            self._free.setdefault(target, []).append(client)
            self._idle += 1
            await self._evict()

    async def _evict(self) -> None:
        while self._idle > MAX_IDLE and self._free:
            _, idle = self._free.popitem(last=False)
            self._idle -= len(idle)
            for client in idle:
                await client.aclose()

    async def close(self) -> None:
        clients = [c for idle in self._free.values() for c in idle] + list(self._busy)
        self._free.clear()
        self._busy.clear()
        self._idle = 0
        for client in clients:
            await client.aclose()


__all__ = ["MAX_IDLE", "USER_AGENT", "TargetPools"]
