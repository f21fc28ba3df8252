"""The peers ``bench_core`` compares with: a huey consumer process, and APScheduler 3 run in
a subprocess (``peer_aps.py``).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import _common as C
from _common import BENCH_DIR, spawn, stop_proc
from core_harness import PY


class HueyConsumer:
    def __init__(self, db: Path, workers: int, logdir: Path) -> None:
        self._log = open(logdir / "huey-consumer.log", "wb")  # noqa: SIM115
        self.proc = spawn(
            [PY, str(BENCH_DIR / "peer_huey.py"), "consumer", str(db), str(workers)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        time.sleep(1.5)
        if self.proc.poll() is not None:
            raise RuntimeError("huey consumer exited at start-up")

    def stop(self) -> None:
        stop_proc(self.proc)
        self._log.close()

    def errors(self) -> list[str]:
        """The consumer's logged errors (huey logs and goes on; a dequeued task can be lost)."""
        self._log.flush()
        text = Path(self._log.name).read_text(errors="replace")
        return [
            line.strip()[:200]
            for line in text.splitlines()
            if "Error" in line or "Exception" in line or "exception" in line
        ][:10]


def _huey_settled_count(h: Any) -> int:
    """Tasks in huey's queue + schedule once the consumer has moved them all: a task it has
    dequeued (deleted) but not yet re-added to the schedule is invisible for a moment."""
    deadline = time.time() + 30
    last, stable_since = -1, time.time()
    while time.time() < deadline:
        n = h.pending_count() + h.scheduled_count()
        if n != last:
            last, stable_since = n, time.time()
        elif h.pending_count() == 0 and time.time() - stable_since >= 2.0:
            break
        time.sleep(0.2)
    return last


def run_aps(workload: str, db: Path, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    proc = spawn(
        [PY, str(BENCH_DIR / "peer_aps.py"), workload, str(db), json.dumps(params)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"APScheduler {workload} did not finish in {timeout:.0f} s") from None
    finally:
        C.forget(proc)
    for line in out.decode().splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[7:])
            return result
    raise RuntimeError(f"APScheduler {workload} failed:\n{err.decode()[-3000:]}")
