"""Two stores (two daemons) on one fresh PostgreSQL database race queue-locking writes in
opposite orders while both claim from the limited queues; prints how many writes and
claims went through and the database's deadlock count (``pg_stat_database``).

Each store's group commit gets six writes at once (a batch): store A in descending name
order, B ascending. ``set`` writes ``set_queue`` (row locks), ``mark`` a worker queue's
mark (advisory lock, then the row). Before branch pglock both deadlocked within seconds.

    python bench/bench_pg_lockorder.py [set|mark] [seconds] [dsn of the admin database]
"""

from __future__ import annotations

import logging
import random
import secrets
import sys
import threading
import time
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from jobctl.domain.clock import FakeClock
from jobctl.domain.dispatch import QueuePolicy
from jobctl.domain.models import JobSpec
from jobctl.store import workerq
from jobctl.store.pg.schedconn import PgSchedConn
from jobctl.store.pg.store import PostgresStore

T0 = datetime(2030, 1, 1, tzinfo=UTC)
QUEUES = [f"q{i}" for i in range(6)]


class _Bounced(logging.Handler):
    """Counts the group commit's batches whose writes were bounced out of lock order."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.n = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.n += "pg_lock_order_bounced" in record.getMessage()


def _write(store: PostgresStore, mode: str, queue: str) -> Future[Any]:
    if mode == "mark":
        return store.db.submit(lambda c: workerq.mark(PgSchedConn(store.db, c), "w" + queue, []))
    policy = QueuePolicy(queue, concurrency=1000)
    return store.db.submit(lambda c: store._queues.set_queue_tx(c, policy))


def _race(a: PostgresStore, b: PostgresStore, mode: str, seconds: float) -> dict[str, int]:
    stop = time.monotonic() + seconds
    done = {"writes": 0, "claimed": 0}

    def writer(store: PostgresStore, order: list[str]) -> None:
        while time.monotonic() < stop:
            for fut in [_write(store, mode, q) for q in order]:
                fut.result()
            done["writes"] += len(order)

    def claimer(store: PostgresStore) -> None:
        while time.monotonic() < stop:
            done["claimed"] += len(store.claim_due("bench", 6, 30.0))

    threads = [
        threading.Thread(target=writer, args=(a, QUEUES[::-1])),
        threading.Thread(target=writer, args=(b, QUEUES)),
        threading.Thread(target=claimer, args=(a,)),
        threading.Thread(target=claimer, args=(b,)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done


def main(mode: str, seconds: float, admin: str) -> None:
    name = "jobctl_lockorder_" + secrets.token_hex(3)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    dsn = admin.rsplit("/", 1)[0] + "/" + name
    bounced = _Bounced()
    logger = logging.getLogger("jobctl.store")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(bounced)
    try:
        a, b = (PostgresStore(dsn, FakeClock(T0), random.Random(i), pool_size=4) for i in (1, 2))
        for q in QUEUES:
            a.set_queue(QueuePolicy(q, concurrency=1000))
            a.insert([JobSpec(("true",), T0 - timedelta(seconds=1), 1000, queue=q)] * 2000)
        a.promote_due(100_000)
        done = _race(a, b, mode, seconds)
        a.close()
        b.close()
        with psycopg.connect(admin) as conn:
            row = conn.execute(
                "SELECT deadlocks FROM pg_stat_database WHERE datname = %s", (name,)
            ).fetchone()
        deadlocks = row[0] if row else None
        print(
            f"mode={mode} seconds={seconds:g} writes={done['writes']} "
            f"claimed={done['claimed']} deadlocks={deadlocks} bounced_batches={bounced.n}"
        )
    finally:
        logger.removeHandler(bounced)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(
        args[0] if args else "set",
        float(args[1]) if len(args) > 1 else 15.0,
        args[2] if len(args) > 2 else "postgresql://postgres@127.0.0.1:5432/postgres",
    )
