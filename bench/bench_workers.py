#!/usr/bin/env python
"""Pull workers' throughput (issue 16): N no-op tasks drained by ``jobctl worker
--concurrency 4`` (4 pool processes) from a real daemon, against huey's consumer with 4
process workers on SqliteHuey, in the same run. Prints tasks/s from the first task's
start to the last one's end (the queue filled before the workers start), with the load
average.

    python bench/bench_workers.py [--tasks 2000]

Figures in docs/benchmarks.md ("Pull workers"); this module is also the task app the
workers import (``--app bench_workers``), so its top level stays light.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jobctl.tasks import App

app = App()
HERE = Path(__file__).resolve().parent


@app.task(queue="bench", name="bench_workers:noop")  # not __main__'s: the workers import it
def noop(n: int) -> int:
    return n


def _wait(what: str, done: Any, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def _env(socket: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["JOBCTL_SOCKET"] = str(socket)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return env


def run_jobctl(tasks: int, tmp: Path) -> float:
    """Tasks/s of ``jobctl worker -c 4`` draining ``tasks`` queued no-op tasks."""
    from jobctl.client import Client

    sock = tmp / "j.sock"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "jobctl", "daemon", "--db", str(tmp / "j.db"), "--socket",
         str(sock)], env=_env(sock), stderr=subprocess.DEVNULL,
    )  # fmt: skip
    worker = None
    try:
        _wait("the daemon", sock.exists, 30)
        with Client(sock, timeout=120) as c:
            _wait("the daemon's answer", lambda: _answers(c), 30)
            body = [noop.job({"n": i}) for i in range(tasks)]
            for i in range(0, tasks, 1000):
                c.enqueue_many(body[i : i + 1000])
            began = time.monotonic()
            worker = subprocess.Popen(
                [sys.executable, "-m", "jobctl", "worker", "--app", "bench_workers", "--queue",
                 "bench", "--concurrency", "4", "--wait", "1"],
                env=_env(sock), stderr=subprocess.DEVNULL,
            )  # fmt: skip
            _wait("the drain", lambda: _ended(c) >= tasks)
            if (ok := c.status()["counts"]["succeeded"]) != tasks:
                raise SystemExit(f"only {ok} of {tasks} tasks succeeded")
            return tasks / (time.monotonic() - began)
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
         "h.create_consumer(workers=4, worker_type='process', periodic=False, "
         "initial_delay=0.01, max_delay=0.1, backoff=1.0).run()"],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait("huey's drain", lambda: len(h) == 0)
        return tasks / (time.monotonic() - began)
    finally:
        consumer.terminate()
        consumer.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        load = os.getloadavg()[0]
        j = run_jobctl(args.tasks, Path(tmp))
        h = run_huey(args.tasks, Path(tmp))
        after = os.getloadavg()[0]
    print(f"tasks={args.tasks} jobctl_worker_c4={j:.0f}/s huey_4_processes={h:.0f}/s "
          f"load={load:.1f}->{after:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
