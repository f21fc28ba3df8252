#!/usr/bin/env python
"""Pull workers' throughput (issue 16): N no-op tasks drained by ``jobctl worker
--concurrency 4`` (4 pool processes) from a real daemon on SQLite and on PostgreSQL,
against huey's consumer (4 process workers, SqliteHuey) and procrastinate's workers (4
worker processes, one job at a time each, on the same PostgreSQL server), in the same run.
Prints tasks/s from the workers' start to the last task ended (the queue filled before
the workers start), with the load average; for jobctl also the time to the first task
ended (``first``), and the CPU per task of the daemon and of the worker with its pool
(``cpu=daemon+worker ms``, from /proc: steadier than rates on a shared machine).

    python bench/bench_workers.py [--tasks 2000] [--db sqlite|postgres|both]
                                  [--base OLD_SRC]

``--base DIR`` also runs jobctl with the ``src`` directory DIR first on ``PYTHONPATH``
(e.g. ``git archive main src | tar -x -C /tmp/base``): old and new side by side in one
run. PostgreSQL is the server at ``JOBCTL_BENCH_PG`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``), in a fresh database per run (named
``JOBCTL_BENCH_PG_PREFIX`` + random, default ``pgbench_workers_``), dropped afterwards;
without a server the PostgreSQL runs are skipped.

Figures in docs/benchmarks.md ("Pull workers"); this module is also the task app the
workers import (``--app bench_workers``), so its top level stays light.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from jobctl.tasks import App

app = App()
HERE = Path(__file__).resolve().parent
PG = os.environ.get("JOBCTL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
PG_PREFIX = os.environ.get("JOBCTL_BENCH_PG_PREFIX", "pgbench_workers_")
WORKERS = 4


@app.task(queue="bench", name="bench_workers:noop")  # not __main__'s: the workers import it
def noop(n: int) -> int:
    return n


def _wait(what: str, done: Callable[[], bool], timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def _env(socket: Path, src: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    env["JOBCTL_SOCKET"] = str(socket)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, str(HERE)) if p)
    return env


@contextmanager
def pg_database() -> Iterator[str]:
    """A fresh database on the bench server, dropped afterwards."""
    import psycopg

    name = PG_PREFIX + secrets.token_hex(4)
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield urlunsplit(urlsplit(PG)._replace(path="/" + name))
    finally:
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def pg_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG, connect_timeout=3):
            return True
    except Exception:
        return False


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) of one live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _session_cpu(sid: int) -> float:
    """CPU seconds of the live processes of session ``sid`` (a worker and its pool)."""
    total = 0.0
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.getsid(int(entry)) == sid:
                total += _cpu(int(entry))
        except OSError:  # gone meanwhile
            continue
    return total


def run_jobctl(tasks: int, tmp: Path, db: str, src: str | None = None) -> str:
    """``rate/s first=S cpu=D+W ms`` of ``jobctl worker -c 4`` draining ``tasks`` queued
    no-op tasks from a daemon on ``db`` (a SQLite file or a PostgreSQL URL): tasks/s,
    seconds to the first task ended, CPU ms per task of the daemon and of the worker
    with its pool (start-up included); ``src``: the jobctl to run."""
    from jobctl.client import Client

    tmp.mkdir(parents=True, exist_ok=True)
    sock = tmp / "j.sock"
    env = _env(sock, src)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "jobctl", "daemon", "--db", db, "--socket", str(sock),
         "--state-dir", str(tmp / "state")], env=env, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    worker = None
    try:
        _wait("the daemon", sock.exists, 30)
        with Client(sock, timeout=120) as c:
            _wait("the daemon's answer", lambda: _answers(c), 30)
            body = [noop.job({"n": i}) for i in range(tasks)]
            for i in range(0, tasks, 1000):
                c.enqueue_many(body[i : i + 1000])
            daemon_cpu, began = _cpu(daemon.pid), time.monotonic()
            worker = subprocess.Popen(
                [sys.executable, "-m", "jobctl", "worker", "--app", "bench_workers", "--queue",
                 "bench", "--concurrency", str(WORKERS), "--wait", "1"],
                env=env, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            _wait("the first task", lambda: _ended(c) > 0)
            first = time.monotonic() - began
            _wait("the drain", lambda: _ended(c) >= tasks)
            elapsed = time.monotonic() - began
            daemon_cpu = _cpu(daemon.pid) - daemon_cpu
            worker_cpu = _session_cpu(worker.pid)
            if (ok := c.status()["counts"]["succeeded"]) != tasks:
                raise SystemExit(f"only {ok} of {tasks} tasks succeeded")
            per_task = f"{daemon_cpu * 1000 / tasks:.2f}+{worker_cpu * 1000 / tasks:.2f}"
            return f"{tasks / elapsed:.0f}/s first={first:.2f}s cpu={per_task}ms"
    finally:
        for p in (worker, daemon):
            if p is not None:
                p.terminate()
                p.wait(30)


def _ended(c: Any) -> int:
    counts = c.status()["counts"]
    return int(counts["succeeded"] + counts["dead"])


def _answers(c: Any) -> bool:
    try:
        c.status()
        return True
    except Exception:
        return False


def run_huey(tasks: int, tmp: Path) -> float:
    """Tasks/s of huey's consumer (4 process workers) draining ``tasks`` queued tasks."""
    from huey import SqliteHuey

    db = str(tmp / "h.db")
    h = SqliteHuey(name="bench", filename=db, results=False)
    hnoop = h.task(name="bench_noop")(lambda n: n)
    for i in range(tasks):
        hnoop(i)
    began = time.monotonic()
    consumer = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from huey import SqliteHuey; h = SqliteHuey(name='bench', "
         f"filename={db!r}, results=False); h.task(name='bench_noop')(lambda n: n); "
         f"h.create_consumer(workers={WORKERS}, worker_type='process', periodic=False, "
         "initial_delay=0.01, max_delay=0.1, backoff=1.0).run()"],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait("huey's drain", lambda: len(h) == 0)
        return tasks / (time.monotonic() - began)
    finally:
        consumer.terminate()
        consumer.wait(30)


def run_procrastinate(tasks: int) -> float:
    """Tasks/s of 4 procrastinate worker processes (one job at a time each, ``wait=False``:
    each stops when the queue is empty) draining ``tasks`` queued no-op tasks, from the
    first ``started`` event to the last ``succeeded`` one as the database recorded them."""
    sys.path.insert(0, str(HERE))
    import peer_procrastinate as PP

    with pg_database() as dsn:
        PP.apply_schema(dsn)
        PP.fill(dsn, tasks)
        procs = [PP.start_worker(dsn, 1) for _ in range(WORKERS)]
        for p in procs:
            p.wait(600)
        done, first, last = PP.drained(dsn)
    if done != tasks:
        raise SystemExit(f"procrastinate: only {done} of {tasks} tasks succeeded")
    return done / (last - first)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--quick", action="store_true", help="500 tasks")
    ap.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--base", help="an older jobctl's src directory, run beside this one")
    args = ap.parse_args()
    tasks = 500 if args.quick else args.tasks
    pg = args.db != "sqlite" and pg_available()
    out: list[str] = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp_dir:
        tmp = Path(tmp_dir)
        for label, src in [("base", args.base), ("", None)] if args.base else [("", None)]:
            tag = f"_{label}" if label else ""
            if args.db != "postgres":
                got = run_jobctl(tasks, tmp / f"s{tag}", str(tmp / f"j{tag}.db"), src)
                out.append(f"jobctl{tag}_sqlite={got}")
            if pg:
                with pg_database() as dsn:
                    got = run_jobctl(tasks, tmp / f"p{tag}", dsn, src)
                out.append(f"jobctl{tag}_postgres={got}")
        out.append(f"huey_4_processes={run_huey(tasks, tmp):.0f}/s")
        if pg:
            out.append(f"procrastinate_4_processes={run_procrastinate(tasks):.0f}/s")
    after = os.getloadavg()[0]
    print(f"tasks={tasks} {' '.join(out)} load={load:.1f}->{after:.1f}")


if __name__ == "__main__":
    main()
