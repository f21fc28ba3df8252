#!/usr/bin/env python
"""Single-job enqueue on PostgreSQL at the store level, without the daemon's HTTP front.

Run ``python bench/bench_pg_store_enqueue.py [--seconds 3] [--clients 8]``: a fresh
database (``JOBCTL_BENCH_PG``, as ``bench_pg.py``), one ``PostgresStore``, N threads that
each insert one keyless job and queue one audit record per call (what a
``POST /v1/jobs`` asks of the store), for a few seconds. Prints jobs/s, this process's
CPU seconds per 1,000 jobs (the client threads and the store: the HTTP front and the
client processes of ``bench_pg.py`` are not in it), the database's server backends' CPU
per 1,000 jobs, and jobs per group commit.

Why: the API benchmark's rate on this shared 2-core machine swings with the other
sessions' load by a factor of two from run to run; the store path's CPU per job, measured
here without the HTTP front, is what a change to the PostgreSQL store moves
(docs/benchmarks.md, "PostgreSQL single-job enqueue in one round trip").
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jobctl.domain.audit import AuditRecord
from jobctl.domain.clock import SystemClock
from jobctl.domain.models import JobSpec
from jobctl.store.pg.store import PostgresStore
from pg_harness import PgCpu, database

FAR = dt.datetime(2099, 1, 1, tzinfo=dt.UTC)


def _job() -> JobSpec:
    return JobSpec(("true",), FAR, 1000)


def _record(n: str) -> AuditRecord:
    return AuditRecord(dt.datetime.now(dt.UTC), n, 1000, 100, 4242, "jobs", "queue:default", 201)


def measure(store: PostgresStore, dsn: str, seconds: float, clients: int) -> str:
    """One run's line (see the module docstring)."""
    commits = [0]
    real = store.db.commits._commit

    def counted(batch: list[object], pool: object) -> None:
        commits[0] += 1
        real(batch, pool)  # type: ignore[arg-type]

    store.db.commits._commit = counted  # type: ignore[method-assign,assignment]
    stop = threading.Event()
    done = [0] * clients

    def client(i: int) -> None:
        n = 0
        while not stop.is_set():
            store.insert([_job()])
            store.audit([_record(f"r{i}-{n}")])
            n += 1
        done[i] = n

    pg = PgCpu(dsn)
    cpu0, t0 = time.process_time(), time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    cpu1, t1 = time.process_time(), time.perf_counter()
    server = pg.stop()
    n = sum(done)
    return (
        f"{n / (t1 - t0):,.0f} jobs/s; CPU s per 1,000 jobs: store {1000 * (cpu1 - cpu0) / n:.3f},"
        f" server {1000 * server / n:.3f}; {n / max(commits[0], 1):.1f} jobs per commit;"
        f" load {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--clients", type=int, default=8)
    args = ap.parse_args()
    with database() as dsn:
        store = PostgresStore(dsn, SystemClock(), pool_size=8)
        try:
            for _ in range(50):  # warm: connections, prepared statements
                store.insert([_job()])
            print(measure(store, dsn, args.seconds, args.clients))
        finally:
            store.close()


if __name__ == "__main__":
    main()
