#!/usr/bin/env python
"""The PostgreSQL server's CPU per pipelined group commit of keyless enqueues, and how
much of it each part costs (an upper bound: the part taken out).

Run ``python bench/bench_pg_commit_cost.py [--k 8] [--rounds 8] [variant ...]``: one
fresh database per variant (``JOBCTL_BENCH_PG``, as ``bench_pg.py``), each with a
``PostgresStore``; on one committer connection of each, the statements of the group
commit's one round trip (``BEGIN``, the queues' shared locks and ``insert_keyless`` of
``k`` jobs, ``insert_audit_rows`` of ``k`` records, ``COMMIT``: store/pg/pipelined.py),
in batches that alternate between the variants, so every variant meets the same load.
Prints the server process's CPU (from /proc) per commit for each variant and its ratio
to the first.

Variants (each but ``base`` weakens the store: for measurement only): ``base``;
``no-audit`` (the audit statement replaced by a trivial one); ``no-count-trigger`` (the
counters' insert trigger disabled); ``no-checks`` (the jobs table's CHECK constraints
dropped); ``no-list-indexes`` (``jobs_status`` and ``jobs_queue`` dropped);
``no-audit-indexes`` (``audit_at``, ``audit_uid``); ``no-idle-indexes`` (the six partial
indexes an enqueue never writes); ``no-fits`` (``insert_keyless``'s worker-queue and
quota check replaced by a constant).

Why: the server's CPU bounds PostgreSQL's single-job enqueue on a busy 2-core host, and
on a shared host two runs of the API benchmark differ by more than any one of these
parts; alternating batches on one host in one process compares them within a few
percent (docs/benchmarks.md, "PostgreSQL server CPU per group commit").
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C
from jobctl.domain.audit import AuditRecord
from jobctl.domain.clock import SystemClock
from jobctl.domain.models import JobSpec
from jobctl.store.audit import audit_params
from jobctl.store.pg.inserts import KeylessPlan
from jobctl.store.pg.store import PostgresStore
from pg_harness import database, uptime

FAR = dt.datetime(2099, 1, 1, tzinfo=dt.UTC)
_DROP_CHECKS = """DO $$ DECLARE c text; BEGIN
FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = 'jobs'::regclass AND contype = 'c'
LOOP EXECUTE format('ALTER TABLE jobs DROP CONSTRAINT %I', c); END LOOP; END $$"""
_IDLE = ("jobs_due", "jobs_due_age", "jobs_lease", "jobs_dead", "jobs_finished", "jobs_schedule")
#: DDL run on a variant's database after its migrations.
DDL: dict[str, str] = {
    "no-count-trigger": "ALTER TABLE jobs DISABLE TRIGGER jobs_count_insert",
    "no-checks": _DROP_CHECKS,
    "no-list-indexes": "DROP INDEX jobs_status; DROP INDEX jobs_queue",
    "no-audit-indexes": "DROP INDEX audit_at; DROP INDEX audit_uid",
    "no-idle-indexes": "; ".join(f"DROP INDEX {i}" for i in _IDLE),
}


def _no_audit(q: dict[str, str]) -> None:
    q["insert_audit_rows"] = "SELECT length(%(rows)s::text) AS n"


def _no_fits(q: dict[str, str]) -> None:
    head, rest = q["insert_keyless"].split("WITH fits AS MATERIALIZED (", 1)
    tail = rest.split(") AS ok\n)", 1)[1]
    fits = "WITH fits AS MATERIALIZED (SELECT %s::text IS NOT NULL AND %s::text IS NOT NULL AS ok)"
    q["insert_keyless"] = head + fits + tail


#: Query texts a variant replaces (the store's own dictionary of named queries).
QUERIES: dict[str, Callable[[dict[str, str]], None]] = {
    "no-audit": _no_audit,
    "no-fits": _no_fits,
}


def commit(store: PostgresStore, conn: Any, k: int, n: int) -> None:
    """``n`` group commits of ``k`` keyless jobs and ``k`` audit records each."""
    db = store.db
    audit = db.q("insert_audit_rows")
    for i in range(n):
        plan = KeylessPlan.make(db, [[JobSpec(("true",), FAR, 1000)] for _ in range(k)])
        assert plan is not None
        at = dt.datetime.now(dt.UTC)
        rows = [
            audit_params(AuditRecord(at, f"r{i}-{j}", 1000, 100, 4242, "jobs", "queue:x", 201))
            for j in range(k)
        ]
        with conn.pipeline():
            conn.execute(b"BEGIN", prepare=False)
            plan.queue(conn)
            conn.execute(audit, {"rows": orjson.dumps(rows).decode()})
            conn.execute(b"COMMIT", prepare=False)
        plan.answer()


class Variant:
    """One variant's database, store and committer connection (in autocommit)."""

    def __init__(self, name: str, stack: contextlib.ExitStack) -> None:
        self.name = name
        dsn = stack.enter_context(database())
        self.store = PostgresStore(dsn, SystemClock(), pool_size=2)
        stack.callback(self.store.close)
        if name in DDL:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(DDL[name].encode())
        if name in QUERIES:
            QUERIES[name](self.store.db._queries)
        self.conn = stack.enter_context(self.store.db.commit_pools[0].connection())
        self.conn.autocommit = True
        stack.callback(setattr, self.conn, "autocommit", False)
        self.pid = self.conn.info.backend_pid
        self.cpu = 0.0

    def batch(self, k: int, n: int) -> None:
        before = C.cpu_seconds(self.pid)
        commit(self.store, self.conn, k, n)
        self.cpu += C.cpu_seconds(self.pid) - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    known = ["base", *QUERIES, *DDL]
    ap.add_argument("variants", nargs="*", default=["base"], choices=known, metavar="VARIANT")
    ap.add_argument("--k", type=int, default=8, help="jobs (and audit records) per commit")
    ap.add_argument("--batch", type=int, default=300, help="commits per batch")
    ap.add_argument("--rounds", type=int, default=8, help="batches per variant")
    args = ap.parse_args()
    load = uptime()
    with contextlib.ExitStack() as stack:
        variants = [Variant(v, stack) for v in args.variants]
        for v in variants:
            commit(v.store, v.conn, args.k, 100)  # warm: prepared statements, caches
        for _ in range(args.rounds):
            for v in variants:
                v.batch(args.k, args.batch)
    n = args.batch * args.rounds
    base = variants[0].cpu
    for v in variants:
        print(f"{v.name}: {1e6 * v.cpu / n:.0f} µs/commit ({v.cpu / base:.2f}x), k={args.k}")
    print(f"load {load} -> {uptime()}")


if __name__ == "__main__":
    main()
