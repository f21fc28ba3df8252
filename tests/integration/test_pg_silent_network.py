"""A network to PostgreSQL that drops packets silently (issue 15): no reset, no error, the
server unreachable. Without TCP keepalives and ``tcp_user_timeout`` a statement sent on
such a connection waits for the kernel's retransmissions (15 minutes and more) and an
idle LISTEN session looks alive for two hours; with them (sized from the lease TTL, see
store/pg/keepalive.py) both are noticed within seconds, and the store works again on
fresh connections once the network is back.

A private server in a network namespace of its own (tests/integration/netns.py) whose
link the test takes down; the host's other traffic never crosses it. Skips without root
or the server binaries (the latter fails under ``JOBCTL_REQUIRE_POSTGRES=1``).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobSpec
from jobctl.errors import StoreUnavailable
from tests.integration.conftest import wait_until
from tests.integration.netns import SilentLink, silent_link
from tests.integration.pgserver import PrivateServer, private_server

pytestmark = pytest.mark.postgres
T0 = datetime(2030, 1, 1, tzinfo=UTC)
#: A lease TTL whose keepalive budget is 1 s (a sixth): probes and unacknowledged data
#: end a dead connection within about a second or four.
TTL = 6.0
#: Seconds a call on the dead network may take: the dead connection noticed (1-4 s), the
#: pool's check of the others, a fresh connection's timeout (3 s), room for a loaded machine.
NOTICED_WITHIN = 20.0


@pytest.fixture(scope="module")
def link() -> Iterator[SilentLink]:
    yield from silent_link()


@pytest.fixture(scope="module")
def server(link: SilentLink) -> Iterator[PrivateServer]:
    yield from private_server((link.name, link.address))


@pytest.fixture
def store(server: PrivateServer, link: SilentLink) -> Iterator[Any]:
    from jobctl.store.pg.store import PostgresStore

    for dbname in server.database("jobctl_silent_"):
        s = PostgresStore(
            server.url(dbname), FakeClock(T0), random.Random(), pool_size=2, lease_ttl=TTL
        )
        try:
            yield s
        finally:
            link.mend()  # a call the test gave up on finishes, and the store can close
            s.close()


def _within(seconds: float, fn: Callable[[], object]) -> object:
    """``fn()``'s result or exception, on a thread of its own; a failure of the test if it
    is still waiting after ``seconds`` (the dead connection not noticed)."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if not out:
        pytest.fail(f"still waiting after {seconds:.0f} s: the dead connection went unnoticed")
    return out[0]


def test_a_heartbeat_on_a_silently_dead_network_fails_fast_then_works_again(
    store: Any, link: SilentLink
) -> None:
    store.insert([JobSpec(("true",), T0, 1000)])
    claim = store.claim_due("w", 1, TTL)[0]
    lease = [(claim.job.id, claim.generation)]
    assert store.heartbeat(lease, TTL) == []  # the leases' pool has a live connection
    link.drop()
    t0 = time.monotonic()
    got = _within(NOTICED_WITHIN, lambda: store.heartbeat(lease, TTL))
    assert isinstance(got, StoreUnavailable), got
    took = time.monotonic() - t0
    link.mend()
    assert _within(NOTICED_WITHIN, lambda: store.heartbeat(lease, TTL)) == [], took


def test_an_idle_listen_session_on_a_silently_dead_network_is_noticed(
    store: Any, link: SilentLink
) -> None:
    listener = store.listen(lambda: None)
    try:
        assert listener.listening.wait(NOTICED_WITHIN)
        link.drop()
        wait_until(
            lambda: not listener.listening.is_set(),
            timeout=NOTICED_WITHIN,
            what="the LISTEN session's loss noticed",
        )
        link.mend()
        assert listener.listening.wait(NOTICED_WITHIN)  # listening again
    finally:
        link.mend()
        listener.close()
