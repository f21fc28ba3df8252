"""Connections of webhook requests, kept alive per target (engine/httpclient.py's).

A target is the scheme, the host name, the port and the checked address together: a
request goes to the address the guard checked (never to a second DNS answer), with the
name kept for ``Host`` and TLS, so two names on one address, or one name pinned to two
addresses, never share a connection. A request takes a free connection of its target (or
opens one) and gives it back when its answer is read; a connection is never shared by
two requests at once, so the per-target limit (``http_per_target``, held by the caller)
also bounds the connections open to a target.

A free connection is dropped rather than reused once the peer closed it, or after
:data:`KEEPALIVE_IDLE` seconds idle (below the 5 s after which common servers close an
idle connection: a request is not sent on a connection the receiver is closing). Targets
are kept in least-recently-used order; past :data:`MAX_IDLE` idle connections in all, the
least recently used targets' are closed.

TLS: one context for all connections, :func:`ssl.create_default_context` (certificates and
host names checked against the system's roots; ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` name
others, as for any OpenSSL program), made at the first https request.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import OrderedDict

from jobctl.domain.netguard import Address
from jobctl.engine.httpclient import USER_AGENT, Answer, Connection

#: Idle (kept-alive) connections in all targets.
MAX_IDLE = 256
#: Seconds a connection may stay idle and still be reused.
KEEPALIVE_IDLE = 4.0
#: scheme, host name, port, checked address.
Target = tuple[str, str, int, Address]


class TargetPools:
    """Free connections per target; see the module docstring."""

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._free: OrderedDict[Target, list[Connection]] = OrderedDict()
        self._busy: set[Connection] = set()
        self._idle = 0
        self._tls: ssl.SSLContext | None = None

    async def exchange(self, target: Target, data: bytes) -> Answer:
        """Send one request's bytes to ``target`` and read its answer (httpclient's
        errors: OSError, TimeoutError); connecting and the TLS handshake are bounded by
        the pool's timeout."""
        conn = self._take(target) or await self._open(target)
        self._busy.add(conn)
        try:
            return await conn.exchange(data)
        finally:
            self._busy.discard(conn)
            self._give_back(target, conn)

    def _take(self, target: Target) -> Connection | None:
        free = self._free.pop(target, None) or []
        self._free[target] = free  # the most recently used last
        now = asyncio.get_running_loop().time()
        while free:
            conn = free.pop()
            self._idle -= 1
            if _alive(conn) and now - conn.idle_since < KEEPALIVE_IDLE:
                return conn
            conn.close()
        return None

    async def _open(self, target: Target) -> Connection:
        scheme, host, port, ip = target
        loop = asyncio.get_running_loop()
        tls = self._context() if scheme == "https" else None
        async with asyncio.timeout(self._timeout):
            _, conn = await loop.create_connection(
                lambda: Connection(self._timeout), str(ip), port, ssl=tls,
                server_hostname=host if tls else None,
                ssl_handshake_timeout=self._timeout if tls else None,
            )  # fmt: skip
        return conn

    def _context(self) -> ssl.SSLContext:
        if self._tls is None:  # one for all: making one costs more than a request
            self._tls = ssl.create_default_context()
        return self._tls

    def _give_back(self, target: Target, conn: Connection) -> None:
        if not _alive(conn):
            conn.close()
            return
        self._free.setdefault(target, []).append(conn)
        self._idle += 1
        while self._idle > MAX_IDLE and self._free:
            _, idle = self._free.popitem(last=False)
            self._idle -= len(idle)
            for old in idle:
                old.close()

    def idle(self, target: Target) -> int:
        """Idle connections kept for ``target`` (tests)."""
        return len(self._free.get(target, ()))

    async def close(self) -> None:
        conns = [c for idle in self._free.values() for c in idle] + list(self._busy)
        self._free.clear()
        self._busy.clear()
        self._idle = 0
        for conn in conns:
            conn.close()
        await asyncio.sleep(0)  # the transports' close callbacks run


def _alive(conn: Connection) -> bool:
    return conn.reusable and conn.transport is not None and not conn.transport.is_closing()


__all__ = ["KEEPALIVE_IDLE", "MAX_IDLE", "USER_AGENT", "Target", "TargetPools"]
