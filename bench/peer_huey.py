"""huey as a benchmark peer: a SqliteHuey app and its consumer process.

Storage: ``SqliteHuey(filename=...)`` with huey's defaults (WAL journal, ``fsync=None``,
which leaves SQLite's compiled-in ``synchronous`` in force; ``storage_pragmas`` reports
what that is on this machine). Results are stored (``results=True``): the tasks return
their start/finish times, and the bench reads them back from the result store.

Consumer: ``python bench/peer_huey.py consumer DB WORKERS`` runs huey's own Consumer with
thread workers, the scheduler at its minimum 1 s interval, and worker polling tuned for
latency (poll every 0.1 s without backoff; huey's default backs off to 10 s when idle).
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

from huey import SqliteHuey

#: Etas are passed as aware UTC datetimes: for a naive eta huey calls ``local_to_utc``,
#: which goes through ``time.mktime`` and drops the fraction of the second (tasks would
#: then run up to 1 s early).
FAR_FUTURE = dt.datetime(2099, 1, 1, tzinfo=dt.UTC)
CONSUMER_OPTIONS = {
    "worker_type": "thread",
    "periodic": False,
    "initial_delay": 0.1,
    "max_delay": 0.1,
    "backoff": 1.0,
    "scheduler_interval": 1,
    "check_worker_health": True,
}


def eta(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC)


def make(db: str) -> tuple[SqliteHuey, Any]:
    h = SqliteHuey(name="bench", filename=db, results=True)

    @h.task(name="bench_true")
    def run_true() -> tuple[float, float]:
        start = time.time()
        subprocess.run(["true"], check=True)
        return start, time.time()

    @h.task(name="bench_lag")
    def lag(eta: float) -> tuple[float, float, float]:
        start = time.time()
        out = subprocess.run(["date", "+%s.%N"], check=True, capture_output=True).stdout
        return eta, start, float(out)

    @h.task(name="bench_noop")
    def noop() -> None:
        return None

    return h, SimpleNamespace(run_true=run_true, lag=lag, noop=noop)


def storage_pragmas(db: str) -> dict[str, Any]:
    h, _ = make(db)
    conn = h.storage.conn
    return {
        "journal_mode": conn.execute("pragma journal_mode").fetchone()[0],
        "synchronous": conn.execute("pragma synchronous").fetchone()[0],
    }


def results(h: SqliteHuey) -> list[Any]:
    return [h.serializer.deserialize(v) for v in h.all_results().values()]


def consumer_main(db: str, workers: int) -> None:
    h, _ = make(db)
    h.create_consumer(workers=workers, **CONSUMER_OPTIONS).run()


if __name__ == "__main__":
    import peer_huey  # as the importable module, so task names match the enqueuers'

    if sys.argv[1] == "consumer":
        peer_huey.consumer_main(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}")
