#!/usr/bin/env python
"""procrastinate (a PostgreSQL job queue) beside jobctl in ``bench_pg``, on the same server.

* enqueue: 8 client processes, each ``task.defer()`` one job per call on its own
  synchronous connector (one transaction per job), jobs on a queue no worker reads;
* drain: N jobs put in with ``batch_defer`` (1,000 per call), then one worker process
  (``app.run_worker(wait=False)``, concurrency 32, an ``async`` no-op task, so the figure is
  procrastinate's own fetch/finish cost) runs until the queue is empty; jobs/s from the
  first ``started`` event to the last ``succeeded`` one, as the database recorded them.

Run as a script only by ``bench_pg`` (``peer_procrastinate.py worker DSN CONCURRENCY``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import procrastinate

ENQUEUE_QUEUE, DRAIN_QUEUE = "enqueue", "drain"


def make_app(dsn: str) -> procrastinate.App:
    """An app with the one no-op task (kwargs ignored)."""
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop", queue=DRAIN_QUEUE)
    async def noop() -> None:
        return None

    return app


def apply_schema(dsn: str) -> None:
    app = make_app(dsn)
    with app.open():
        app.schema_manager.apply_schema()


def enqueue_client(dsn: str, warmup: int, duration: float, barrier: Any, out: Any) -> None:
    """``defer()`` one job per call until ``duration`` is over (``_common.run_clients``)."""
    try:
        app = make_app(dsn)
        with app.open():
            task = app.tasks["noop"].configure(queue=ENQUEUE_QUEUE)
            for _ in range(warmup):
                task.defer()
            barrier.wait()
            t0 = time.time()
            end, n, lat = t0 + duration, 0, []
            while (s := time.time()) < end:
                task.defer()
                lat.append(time.time() - s)
                n += 1
        out.put(
            {"jobs": n, "t0": t0, "last": time.time(), "lat": lat, "errors": 0, "warm_jobs": warmup}
        )
    except BaseException as exc:  # reported to the parent, which raises
        out.put({"error": repr(exc)})


def fill(dsn: str, n: int) -> None:
    """``n`` jobs on the drain queue, 1,000 per ``batch_defer``."""
    app = make_app(dsn)
    with app.open():
        task = app.tasks["noop"]
        for first in range(0, n, 1000):
            task.batch_defer(*[{}] * min(1000, n - first))


def start_worker(dsn: str, concurrency: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, "worker", dsn, str(concurrency)])


def drained(dsn: str) -> tuple[int, float, float]:
    """(jobs succeeded, first start, last success) on the drain queue, epoch seconds."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE e.type = 'succeeded'),"
            " extract(epoch FROM min(e.at) FILTER (WHERE e.type = 'started')),"
            " extract(epoch FROM max(e.at) FILTER (WHERE e.type = 'succeeded'))"
            " FROM procrastinate_events e JOIN procrastinate_jobs j ON j.id = e.job_id"
            " WHERE j.queue_name = %s",
            (DRAIN_QUEUE,),
        ).fetchone()
    assert row is not None
    return int(row[0]), float(row[1] or 0), float(row[2] or 0)


def _worker(dsn: str, concurrency: int) -> None:
    make_app(dsn).run_worker(
        queues=[DRAIN_QUEUE], concurrency=concurrency, wait=False, install_signal_handlers=False
    )


if __name__ == "__main__":
    _worker(sys.argv[2], int(sys.argv[3]))
