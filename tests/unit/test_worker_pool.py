"""``jobctl worker``'s pool start (worker.start_pool): forked from the worker while it has
one thread (ready at once, the app already imported), through a fork server once a
thread runs (a fork then could copy a lock held by a thread the child does not have)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from jobctl.worker import WorkerConfig, start_pool


def _cfg() -> WorkerConfig:
    return WorkerConfig("tests.workers.app_tasks", ["wq"], Path("/nonexistent"), concurrency=2)


#: Run in a fresh interpreter: a test process may hold other tests' threads.
FORKED = """
import json, os, signal, sys
from pathlib import Path
from jobctl.worker import WorkerConfig, start_pool
signal.signal(signal.SIGTERM, lambda *_: None)  # the worker's stop handler
cfg = WorkerConfig("tests.workers.app_tasks", ["wq"], Path("/nonexistent"), concurrency=2)
pool = start_pool(cfg)
started = len(pool._processes)
parents = sorted({pool.submit(os.getppid).result(10) for _ in range(4)})
term = pool.submit(signal.getsignal, signal.SIGTERM).result(10)
intr = pool.submit(signal.getsignal, signal.SIGINT).result(10)
pool.shutdown()
print(json.dumps([started, parents, os.getpid(), term == signal.SIG_DFL,
                  intr is signal.default_int_handler]))
"""


def test_a_single_threaded_worker_forks_its_pool_with_default_signals() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", FORKED], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    started, parents, me, term_default, int_default = json.loads(out.stdout)
    assert started == 2  # before any task
    assert parents == [me]  # forked from the worker itself, not from a fork server
    assert term_default and int_default  # not the worker's stop handler


def test_a_worker_with_threads_uses_a_fork_server() -> None:
    release = threading.Event()
    t = threading.Thread(target=release.wait)
    t.start()
    try:
        pool = start_pool(_cfg())
        try:
            assert pool.submit(os.getppid).result(30) != os.getpid()
        finally:
            pool.shutdown()
    finally:
        release.set()
        t.join()
