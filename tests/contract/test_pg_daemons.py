"""PostgreSQL only: the ``daemons`` table. Each daemon's heartbeat row is seen by every
other store on the database; silent for 3 lease TTLs it is gone, a clean stop says so."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.cluster import DaemonBeat
from tests.contract.conftest import PG_DSN, pg_schema

pytestmark = pytest.mark.postgres
T0 = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def two() -> Iterator[tuple[Any, Any, FakeClock]]:
    from jobctl.store.pg.store import PostgresStore

    for schema in pg_schema():
        clock = FakeClock(T0)
        a = PostgresStore(PG_DSN, clock, random.Random(1), schema=schema, pool_size=2)
        b = PostgresStore(PG_DSN, clock, random.Random(2), schema=schema, pool_size=2)
        try:
            yield a, b, clock
        finally:
            a.close()
            b.close()


def _beat(owner: str, running: int = 0) -> DaemonBeat:
    host, pid, _ = owner.split(":")
    return DaemonBeat(owner, host, int(pid), "9.9", T0, T0, running, 4, 30.0)


def test_every_store_sees_every_daemon_and_who_is_gone(two: tuple[Any, Any, FakeClock]) -> None:
    a, b, clock = two
    a.daemon_beat(_beat("h1:10:aa"))
    b.daemon_beat(_beat("h2:20:bb", running=3))
    seen = {d.owner: d for d in a.daemons()}
    assert set(seen) == {"h1:10:aa", "h2:20:bb"}
    assert (seen["h2:20:bb"].running, seen["h2:20:bb"].slots) == (3, 4)
    assert {d.state(clock.now()) for d in b.daemons()} == {"live"}
    clock.advance(60)
    a.daemon_beat(_beat("h1:10:aa", running=1))  # h2 silent since T0
    clock.advance(31)  # 91 s: past 3 TTLs of 30 s for h2 only
    states = {d.owner: d.state(clock.now()) for d in b.daemons()}
    assert states == {"h1:10:aa": "live", "h2:20:bb": "gone"}
    assert {d.owner: d.last_seen for d in b.daemons()}["h1:10:aa"] == T0 + timedelta(seconds=60)


def test_a_clean_stop_is_shown_and_a_new_beat_revives(two: tuple[Any, Any, FakeClock]) -> None:
    a, b, clock = two
    a.daemon_beat(_beat("h1:10:aa"))
    a.daemon_stopped("h1:10:aa")
    assert [d.state(clock.now()) for d in b.daemons()] == ["stopped"]
    a.daemon_beat(_beat("h1:10:aa"))
    assert [d.state(clock.now()) for d in b.daemons()] == ["live"]


def test_rows_older_than_a_day_are_forgotten(two: tuple[Any, Any, FakeClock]) -> None:
    a, b, clock = two
    a.daemon_beat(_beat("h1:10:aa"))
    clock.advance(86_400 + 1)
    assert b.daemons() == []
