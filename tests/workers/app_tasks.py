"""Tasks the worker tests run (imported by ``jobctl worker --app tests.workers.app_tasks``
in real worker processes). Each writes what it did to a file the test reads."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from jobctl.tasks import App

app = App()
FAST = (0.05, 0.1)  # backoff (base, cap): retries come at once in tests


def _note(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


@app.task(queue="wq", max_attempts=3, backoff=FAST)
def record(path: str, n: int) -> int:
    _note(path, f"run {n} {os.getpid()}")
    return n * 2


@app.task(queue="wq", max_attempts=2, backoff=FAST)
def boom(path: str) -> None:
    _note(path, "boom")
    raise ValueError("boom!")


@app.task(queue="wq", max_attempts=3, backoff=FAST)
def gated(path: str, gate: str) -> str:
    """Runs until the test creates ``gate`` (at most a minute)."""
    _note(path, f"start {os.getpid()}")
    deadline = time.monotonic() + 60
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    _note(path, "done")
    return "ok"


@app.task(queue="wq")
async def arecord(path: str, n: int) -> int:
    await asyncio.sleep(0)
    _note(path, f"async {n}")
    return n + 1
