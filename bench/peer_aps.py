"""APScheduler 3.x as a benchmark peer: one process runs the workload and prints JSON.

``python bench/peer_aps.py WORKLOAD DB PARAMS_JSON``. The process holds a
``BackgroundScheduler`` with a ``SQLAlchemyJobStore`` on a SQLite file (SQLAlchemy's
defaults: rollback journal, SQLite's compiled-in ``synchronous``; reported in the output)
and a ``ThreadPoolExecutor``. APScheduler 3 is a library, not a service: its job store
must not be shared by several scheduler processes, so "concurrent clients" are threads of
this process calling ``scheduler.add_job`` (one INSERT + COMMIT each). Jobs get
``misfire_grace_time=None`` so none is silently dropped for starting late (the default
grace of 1 s would skip late jobs instead of running them).

Workloads: ``enqueue`` (add date jobs far in the future for a fixed time), ``e2e``
(N jobs all due at one instant, each running ``true``), ``lag`` (jobs due at spread
times, each recording when it started and when its ``date`` process ran).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
import time
from typing import Any

RECORDS: list[tuple[float, ...]] = []


def run_true() -> None:
    start = time.time()
    subprocess.run(["true"], check=True)
    RECORDS.append((start, time.time()))


def lag(eta: float) -> None:
    start = time.time()
    out = subprocess.run(["date", "+%s.%N"], check=True, capture_output=True).stdout
    RECORDS.append((eta, start, float(out)))


def noop() -> None:
    return None


def scheduler(db: str, workers: int) -> Any:
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    return BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{db}")},
        executors={"default": ThreadPoolExecutor(workers)},
        job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 1},
        timezone=dt.UTC,
    )


def pragmas(sched: Any) -> dict[str, Any]:
    from sqlalchemy import text

    engine = sched._lookup_jobstore("default").engine
    with engine.connect() as conn:
        return {
            "journal_mode": conn.execute(text("pragma journal_mode")).scalar(),
            "synchronous": conn.execute(text("pragma synchronous")).scalar(),
        }


def _threads(n: int, fn: Any) -> None:
    threads = [threading.Thread(target=fn, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def enqueue(db: str, p: dict[str, Any]) -> dict[str, Any]:
    sched = scheduler(db, p["workers"])
    sched.start()
    far = dt.datetime(2099, 1, 1, tzinfo=dt.UTC)
    for _ in range(p["warmup"]):
        sched.add_job(noop, "date", run_date=far)
    barrier = threading.Barrier(p["clients"])
    res: list[dict[str, Any]] = []

    def client(_: int) -> None:
        barrier.wait()
        t0 = time.time()
        end = t0 + p["duration"]
        n = 0
        lat = []
        while (s := time.time()) < end:
            sched.add_job(noop, "date", run_date=far)
            n += 1
            lat.append(time.time() - s)
        res.append({"jobs": n, "t0": t0, "last": time.time(), "lat": lat})

    _threads(p["clients"], client)
    stored = len(sched.get_jobs())
    info = pragmas(sched)
    sched.shutdown(wait=True)
    jobs = sum(r["jobs"] for r in res)
    wall = max(r["last"] for r in res) - min(r["t0"] for r in res)
    lat = [x for r in res for x in r["lat"]]
    return {
        "jobs": jobs,
        "wall": wall,
        "rate": jobs / wall,
        "lat": lat,
        "stored": stored,
        "expected": jobs + p["warmup"],
        "pragmas": info,
    }


def _add_all(sched: Any, items: list[tuple[float, Any]], clients: int) -> float:
    """Add (due epoch, callable or (callable, args)) items from ``clients`` threads."""
    t0 = time.time()

    def client(i: int) -> None:
        for eta, fn in items[i::clients]:
            func, args = fn if isinstance(fn, tuple) else (fn, ())
            sched.add_job(func, "date", run_date=dt.datetime.fromtimestamp(eta, dt.UTC), args=args)

    _threads(clients, client)
    return time.time() - t0


def _wait(n: int, timeout: float) -> bool:
    deadline = time.time() + timeout
    while len(RECORDS) < n and time.time() < deadline:
        time.sleep(0.2)
    return len(RECORDS) >= n


def e2e(db: str, p: dict[str, Any]) -> dict[str, Any]:
    sched = scheduler(db, p["workers"])
    sched.start()
    due = time.time() + p["margin"]
    add_s = _add_all(sched, [(due, run_true)] * p["n"], p["clients"])
    late_enqueue = time.time() > due
    done = _wait(p["n"], max(0.0, due - time.time()) + p["timeout"])
    left = len(sched.get_jobs())
    sched.shutdown(wait=True)
    recs = list(RECORDS)
    out: dict[str, Any] = {
        "n": p["n"],
        "done": len(recs),
        "complete": done,
        "add_seconds": add_s,
        "late_enqueue": late_enqueue,
        "left": left,
    }
    if recs:
        first, last = min(r[0] for r in recs), max(r[1] for r in recs)
        out.update(
            first_start=first,
            last_finish=last,
            wall=last - first,
            rate=len(recs) / (last - first) if last > first else float("nan"),
            due_to_last=last - due,
        )
    return out


def lag_run(db: str, p: dict[str, Any]) -> dict[str, Any]:
    sched = scheduler(db, p["workers"])
    sched.start()
    t0 = time.time() + p["margin"]
    step = p["spread"] / p["n"]
    etas = [round(t0 + i * step, 3) for i in range(p["n"])]
    items = [(eta, (lag, (eta,))) for eta in etas]
    add_s = _add_all(sched, items, p["clients"])
    late_enqueue = time.time() > t0
    done = _wait(p["n"], p["spread"] + max(0.0, t0 - time.time()) + p["timeout"])
    sched.shutdown(wait=True)
    return {
        "n": p["n"],
        "done": len(RECORDS),
        "complete": done,
        "add_seconds": add_s,
        "late_enqueue": late_enqueue,
        "dispatch": [r[1] - r[0] for r in RECORDS],
        "exec": [r[2] - r[0] for r in RECORDS],
    }


def main() -> None:
    workload, db, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    fn = {"enqueue": enqueue, "e2e": e2e, "lag": lag_run}[workload]
    result = fn(db, params)
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    import peer_aps  # run as the importable module, so job references are "peer_aps:fn"

    peer_aps.main()
