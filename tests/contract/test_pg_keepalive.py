"""PostgreSQL only: every connection of the store has TCP keepalives and
``tcp_user_timeout`` sized from the lease TTL (issue 15: a network that drops packets
silently is noticed within the lease margin), read back from the connection's own socket
(``getsockopt``), not only from libpq's parameters; a parameter in the user's URL wins.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.store.pg.keepalive import connect_params, keepalive_params
from tests.contract.conftest import PG_DSN, pg_schema

pytestmark = pytest.mark.postgres
T0 = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def schema() -> Iterator[str]:
    yield from pg_schema()


def _with(dsn: str, param: str) -> str:
    return dsn + ("&" if "?" in dsn else "?") + param


def _socket_options(conn: Any) -> dict[str, int]:
    """The TCP options the kernel holds for ``conn``'s socket."""
    sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
    try:
        tcp = socket.IPPROTO_TCP
        return {
            "keepalives": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "keepalives_idle": sock.getsockopt(tcp, socket.TCP_KEEPIDLE),
            "keepalives_interval": sock.getsockopt(tcp, socket.TCP_KEEPINTVL),
            "keepalives_count": sock.getsockopt(tcp, socket.TCP_KEEPCNT),
            "tcp_user_timeout": sock.getsockopt(tcp, socket.TCP_USER_TIMEOUT),
        }
    finally:
        sock.close()


def test_the_settings_follow_the_lease_ttl() -> None:
    """A sixth of the TTL: 5 s at the default 30 s (idle 2 s, then 3 probes a second)."""
    assert keepalive_params(30) == {
        "keepalives": 1,
        "keepalives_idle": 2,
        "keepalives_interval": 1,
        "keepalives_count": 3,
        "tcp_user_timeout": 5000,
    }
    assert keepalive_params(120)["keepalives_idle"] == 10
    assert keepalive_params(120)["keepalives_interval"] == 3
    assert keepalive_params(120)["tcp_user_timeout"] == 20_000
    tiny = keepalive_params(1)  # libpq's whole seconds: never 0 (which means "default")
    assert tiny["keepalives_idle"] == tiny["keepalives_interval"] == 1
    assert tiny["tcp_user_timeout"] == 1000


def test_the_url_s_own_parameters_win() -> None:
    got = connect_params(_with(PG_DSN, "keepalives_idle=60&tcp_user_timeout=0"), 30)
    assert "keepalives_idle" not in got and "tcp_user_timeout" not in got
    assert got["keepalives_interval"] == 1
    assert connect_params("host=db keepalives=0", 30).keys() == {
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
    }  # with keepalives=0 libpq ignores the others: the user's choice holds


def test_every_connection_of_every_pool_and_the_listener_carries_them(schema: str) -> None:
    from jobctl.store.pg.store import PostgresStore

    store = PostgresStore(PG_DSN, FakeClock(T0), random.Random(), schema=schema, lease_ttl=60)
    try:
        want = keepalive_params(60)
        for pool in (store.db.pool, store.db.lease_pool, *store.db.commit_pools):
            with pool.connection() as conn:
                assert _socket_options(conn) == {**want, "keepalives": 1}
                params = conn.info.get_parameters()
                assert params["tcp_user_timeout"] == str(want["tcp_user_timeout"])
        assert store.db.connect_params == want  # what the listener connects with
    finally:
        store.close()


def test_a_parameter_in_the_url_reaches_the_socket_instead(schema: str) -> None:
    from jobctl.store.pg.store import PostgresStore

    dsn = _with(PG_DSN, "keepalives_idle=7")
    store = PostgresStore(dsn, FakeClock(T0), random.Random(), schema=schema, pool_size=1)
    try:
        with store.db.pool.connection() as conn:
            got = _socket_options(conn)
        assert got["keepalives_idle"] == 7
        assert got["tcp_user_timeout"] == keepalive_params()["tcp_user_timeout"]
    finally:
        store.close()
