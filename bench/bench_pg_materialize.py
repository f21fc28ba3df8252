"""Materialize on both backends (store level): N every-minute schedules, one occurrence
each, materialized in batches of 1,000 through the store (group commit included).

    python bench/bench_pg_materialize.py [--schedules N] [--dsn URL]

PostgreSQL runs in a schema of its own (``jobctl_bench_mat``, dropped afterwards); the
machine's load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobTemplate
from jobctl.domain.schedule import Misfire, Overlap, Policy, ScheduleSpec, Timing
from jobctl.store.base import Store
from jobctl.store.sqlite import SqliteStore

T0 = datetime(2030, 1, 1, tzinfo=UTC)
BATCH = 1000
SCHEMA = "jobctl_bench_mat"


def _spec() -> ScheduleSpec:
    policy = Policy(Misfire.ONCE, 100, Overlap.ALLOW)
    template = JobTemplate(("true",), max_attempts=1)
    return ScheduleSpec(Timing("UTC", every=60, anchor=T0), policy, template, 1000)


def run(store: Store, clock: FakeClock, n: int) -> float:
    """Occurrences materialized per second."""
    for _ in range(0, n, BATCH):
        store.create_schedules([_spec() for _ in range(BATCH)])
    clock.set(T0 + timedelta(minutes=1, seconds=1))
    start, made = time.perf_counter(), 0
    while True:
        done = store.materialize(BATCH)
        made += len(done.created)
        if done.schedules < BATCH:
            break
    return made / (time.perf_counter() - start)


def postgres(dsn: str, n: int) -> float:
    import psycopg

    from jobctl.store.pg.store import PostgresStore

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
    try:
        clock = FakeClock(T0)
        store = PostgresStore(dsn, clock, random.Random(1), schema=SCHEMA)
        try:
            return run(store, clock, n)
        finally:
            store.close()
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=20_000)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    pg = postgres(args.dsn, args.schedules)
    with tempfile.TemporaryDirectory() as tmp:
        clock = FakeClock(T0)
        sqlite = SqliteStore(Path(tmp) / "bench.db", clock, random.Random(1))
        try:
            lite = run(sqlite, clock, args.schedules)
        finally:
            sqlite.close()
    print(f"materialize, {args.schedules} schedules: PostgreSQL {pg:,.0f}/s, SQLite {lite:,.0f}/s")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
