"""What ``jobctl worker`` does once its options are read: by the Typer command
(cli/worker_cmd.py) or by the lean reader (cli/fast.py), which starts a worker without
importing Typer (~0.25 s of CPU before the first lease; docs/benchmarks.md)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

#: ``--concurrency``, ``--wait`` and ``--grace`` when not given (both readers).
DEFAULT_CONCURRENCY = 4
DEFAULT_WAIT = 10.0
DEFAULT_GRACE = 30.0


def run_worker(
    app: str,
    queues: list[str],
    concurrency: int,
    lease_ttl: float,
    wait: float,
    grace: float,
    prefetch: int | None,
    socket: Path | None,
) -> int:
    """Lease and run ``app``'s tasks until a stop signal; the exit status."""
    from jobctl.paths import default_socket
    from jobctl.worker import Worker, WorkerConfig, install_signals

    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # --app myapp.tasks from the project's directory
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = WorkerConfig(
        app, list(queues), socket or default_socket(), concurrency, lease_ttl, wait, grace, prefetch
    )
    w = Worker(cfg)
    undo = install_signals(w)
    try:
        return w.run()
    finally:
        undo()


__all__ = ["DEFAULT_CONCURRENCY", "DEFAULT_GRACE", "DEFAULT_WAIT", "run_worker"]
