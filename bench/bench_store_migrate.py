"""``jobctl store migrate`` throughput: a SQLite store of N jobs (a fifth of them run, so
with attempts) and M schedules moved into a fresh PostgreSQL database on this machine's
server (127.0.0.1), dropped afterwards. Prints jobs/s, rows/s and the load average.

Usage: python bench/bench_store_migrate.py [--jobs 100000] [--schedules 10000]
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, JobSpec, JobTemplate
from jobctl.domain.schedule import Policy, ScheduleSpec, Timing
from jobctl.domain.states import Outcome
from jobctl.store.pg.move import move
from jobctl.store.sqlite import SqliteStore

SERVER = "postgresql://postgres@127.0.0.1:5432"
T0 = datetime(2030, 1, 1, tzinfo=UTC)
DONE = AttemptResult(Outcome.SUCCEEDED, 0)


def build(path: Path, jobs: int, schedules: int) -> None:
    """The source store: ``jobs`` jobs in batches, a fifth run to success, ``schedules``
    schedules (every minute)."""
    clock = FakeClock(T0)
    store = SqliteStore(path, clock, random.Random(1))
    try:
        for start in range(0, jobs, 1000):
            n = min(1000, jobs - start)
            store.insert(
                [JobSpec(("true", str(start + i)), T0, 1000, env=(("A", "b"),)) for i in range(n)]
            )
        for _ in range(jobs // 5 // 500):
            for c in store.claim_due("bench:1:aa", 500, 30):
                store.finish(c.job.id, c.generation, DONE)
        template = JobTemplate(("true",), max_attempts=1)
        for start in range(0, schedules, 500):
            specs = [
                ScheduleSpec(Timing("UTC", cron="* * * * *"), Policy(), template, 1000)
                for _ in range(min(500, schedules - start))
            ]
            store.create_schedules(specs)
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--schedules", type=int, default=10_000)
    args = parser.parse_args()
    name = "pgmove_bench_" + secrets.token_hex(4)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "jobctl.db"
        started = time.monotonic()
        build(src, args.jobs, args.schedules)
        took, size = time.monotonic() - started, src.stat().st_size / 2**20
        print(f"built {args.jobs} jobs, {args.schedules} schedules in {took:.1f} s; {size:.0f} MiB")
        with psycopg.connect(SERVER + "/postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        try:
            before = os.getloadavg()
            moved = move(src, f"{SERVER}/{name}", progress=lambda _: None)
            after = os.getloadavg()
        finally:
            with psycopg.connect(SERVER + "/postgres", autocommit=True) as conn:
                conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
    rows = sum(moved.rows.values())
    print(
        f"moved {moved.jobs} jobs ({rows} rows: {moved.rows}) in {moved.seconds:.1f} s: "
        f"{moved.jobs / moved.seconds:.0f} jobs/s, {rows / moved.seconds:.0f} rows/s; "
        f"load average before {before[0]:.1f}, after {after[0]:.1f}"
    )


if __name__ == "__main__":
    main()
