"""Store-level throughput of the two backends, side by side (issue 15, first figures).

Not the daemon benchmark of the issue (enqueue through the API, scheduler ceiling per
daemon count, cross-daemon lag): the daemon does not run on PostgreSQL yet. This measures
what the store itself sustains, in one process, on this machine's PostgreSQL (local,
127.0.0.1) and on a SQLite file:

* insert, 8 threads, one job per call (group commit gathers concurrent calls);
* insert, 8 threads, 500 jobs per call;
* drain: claim 100 at a time and finish them with one ``finish_many`` each, by 1, 2 and 4
  stores on one database (as 1, 2 and 4 daemons would hold), counting double claims.

Usage: python bench/bench_pg_store.py [--jobs 20000] [--write-docs]
"""

from __future__ import annotations

import argparse
import platform
import random
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

import _common as C
from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, JobSpec
from jobctl.domain.states import Outcome
from jobctl.store.pg.store import PostgresStore
from jobctl.store.sqlite import SqliteStore

DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
T0 = datetime(2030, 1, 1, tzinfo=UTC)
MARK = ("<!-- bench_pg_store:start -->", "<!-- bench_pg_store:end -->")
DONE = AttemptResult(Outcome.SUCCEEDED, 0)


@contextmanager
def backend(kind: str, clock: FakeClock) -> Iterator[Callable[[], Any]]:
    """A factory of stores on one fresh database of ``kind``; all closed afterwards."""
    opened: list[Any] = []
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "b.db"

            def make_sqlite() -> Any:
                # one SQLite file has one writer: every "daemon" shares the one store
                if not opened:
                    opened.append(SqliteStore(path, clock, random.Random(1), lock=False))
                return opened[0]

            yield make_sqlite
            for s in opened:
                s.close()
        return
    schema = "jobctl_b_" + secrets.token_hex(4)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:

        def make_pg() -> Any:
            s = PostgresStore(DSN, clock, random.Random(1), schema=schema, pool_size=8)
            opened.append(s)
            return s

        yield make_pg
        for s in opened:
            s.close()
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def threads(n: int, fn: Callable[[int], Any]) -> float:
    """Seconds for fn(0..n-1) on n threads started together."""
    start = threading.Barrier(n + 1)

    def run(i: int) -> None:
        start.wait()
        fn(i)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def enqueue_rate(kind: str, jobs: int, batch: int) -> float:
    clock = FakeClock(T0)
    with backend(kind, clock) as make:
        store = make()
        per = jobs // 8

        def work(i: int) -> None:
            for first in range(0, per, batch):
                store.insert([JobSpec(("true",), T0, 1000) for _ in range(min(batch, per - first))])

        return (per * 8) / threads(8, work)


def drain_rate(kind: str, jobs: int, daemons: int) -> tuple[float, int]:
    """Jobs/s claimed and finished by ``daemons`` stores; and the double claims seen."""
    clock = FakeClock(T0)
    with backend(kind, clock) as make:
        stores = [make() for _ in range(daemons)]
        for _first in range(0, jobs, 1000):
            stores[0].insert([JobSpec(("true",), T0, 1000) for _ in range(1000)])
        seen: list[list[int]] = [[] for _ in range(daemons)]

        def work(i: int) -> None:
            while claims := stores[i].claim_due(f"d{i}", 100, 60):
                seen[i] += [c.job.id for c in claims]
                stores[i].finish_many([(c.job.id, c.generation, DONE) for c in claims])

        took = threads(daemons, work)
        ids = [j for s in seen for j in s]
        return len(ids) / took, len(ids) - len(set(ids))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    rows: list[Row] = []
    inserts: tuple[tuple[str, Callable[[str], float]], ...] = (
        (
            "insert, 8 threads, 1 job per call (jobs/s)",
            lambda k: enqueue_rate(k, args.jobs // 10, 1),
        ),
        (
            "insert, 8 threads, 500 jobs per call (jobs/s)",
            lambda k: enqueue_rate(k, args.jobs, 500),
        ),
    )
    for label, fn in inserts:
        rows.append((label, fn("sqlite"), fn("postgres"), ""))
    for n in (1, 2, 4):
        s_rate, s_dup = drain_rate("sqlite", args.jobs, n)
        p_rate, p_dup = drain_rate("postgres", args.jobs, n)
        rows.append(
            (
                f"claim 100 + finish_many, {n} store(s) (jobs/s)",
                s_rate,
                p_rate,
                f"{s_dup} / {p_dup}",
            )
        )
    text = render(rows, args.jobs)
    print(text)
    if args.write_docs:
        C.write_section(MARK, f"{MARK[0]}\n{text}\n{MARK[1]}")


Row = tuple[str, float, float, str]


def render(rows: list[Row], jobs: int) -> str:
    """The section of docs/benchmarks.md between this script's markers."""
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()} "
        f"({platform.machine()}, 2 cores), {jobs} jobs, PostgreSQL 15 on 127.0.0.1, "
        "**under load** (other sessions' test suites ran meanwhile: noisy, lower bounds).",
        "",
        "| workload | SQLite | PostgreSQL | double claims (SQLite / PG) |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b:,.0f} | {c:,.0f} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
