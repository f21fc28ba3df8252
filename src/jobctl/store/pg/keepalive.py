"""TCP keepalives and ``tcp_user_timeout`` on the daemon's connections, from the lease TTL.

A network that drops packets silently (a firewall forgetting the flow, a host unplugged)
gives no error: a statement sent on such a connection waits for the kernel's own
retransmission limit (15 minutes and more on Linux), and an idle pooled connection or the
LISTEN connection stays "up" for hours. A heartbeat stuck that long would make the lease
watch give up commands that a fresh connection could have kept, and the daemon would
keep failing on dead connections after the network healed.

So every connection asks libpq for:

- ``tcp_user_timeout``: data sent and not acknowledged for this long ends the
  connection (a statement or a commit in flight);
- ``keepalives`` with ``keepalives_idle``, ``keepalives_interval`` and
  ``keepalives_count``: an idle connection, or one waiting for an answer, is probed and
  ended when the probes go unanswered.

Both are sized to :func:`budget`, a sixth of the lease TTL (5 s at the default 30 s): a
heartbeat sent at ``ttl / 3`` on a dead connection fails by ``ttl / 2`` and is retried
within a second on a fresh connection, before the lease watch gives the lease up at
``2/3 ttl`` (engine/leasewatch.py). libpq takes whole seconds for the keepalive
settings, so they are never below 1 s (a 1 s TTL is probed no faster than that).

A parameter the user put in the database URL (``?keepalives_idle=60``, or
``keepalives=0`` to turn probing off) wins: only the ones it leaves out are added.
"""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import conninfo_to_dict

from jobctl.domain.workers import DEFAULT_LEASE_TTL

#: Unanswered probes that end a connection.
KEEPALIVE_COUNT = 3


def budget(lease_ttl: float) -> float:
    """Seconds within which a dead connection is noticed: a sixth of the lease TTL."""
    return lease_ttl / 6


def keepalive_params(lease_ttl: float = DEFAULT_LEASE_TTL) -> dict[str, int]:
    """The libpq parameters for ``lease_ttl``: idle half the budget, then
    :data:`KEEPALIVE_COUNT` probes over the other half; ``tcp_user_timeout`` the budget
    (in milliseconds)."""
    half = budget(lease_ttl) / 2
    return {
        "keepalives": 1,
        "keepalives_idle": max(1, int(half)),
        "keepalives_interval": max(1, int(half / KEEPALIVE_COUNT)),
        "keepalives_count": KEEPALIVE_COUNT,
        "tcp_user_timeout": max(1000, int(budget(lease_ttl) * 1000)),
    }


def connect_params(dsn: str, lease_ttl: float = DEFAULT_LEASE_TTL) -> dict[str, Any]:
    """What to pass to ``psycopg.connect`` beside ``dsn``: the keepalive parameters the
    DSN does not set itself (keyword arguments would override the DSN's own)."""
    given = conninfo_to_dict(dsn)
    return {k: v for k, v in keepalive_params(lease_ttl).items() if k not in given}


__all__ = ["KEEPALIVE_COUNT", "budget", "connect_params", "keepalive_params"]
