"""``jobctl worker``'s pool dies with it (worker.start_pool, docs/workers.md): pool
processes forked from the worker would outlive a worker killed alone (SIGKILL to its
pid, not its process group), waiting forever on a call queue whose write end they hold
themselves, a task going on running for nobody (the fork server's children ended with
the fork server). Real daemon, real worker."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from tests.integration.conftest import wait_until
from tests.integration.test_workers_daemon import WorkerProc, workers  # noqa: F401
from tests.workers import app_tasks


def _session(sid: int) -> set[int]:
    """The live (not zombie) processes of session ``sid``."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat[0] != "Z" and int(stat[3]) == sid:
            found.add(int(entry))
    return found


def test_a_worker_killed_alone_takes_its_pool_with_it(
    workers: Callable[..., WorkerProc],  # noqa: F811
    tmp_path: Path,
) -> None:
    out, gate = tmp_path / "out", tmp_path / "gate"
    a = workers("--concurrency", "2")
    app_tasks.gated.defer(path=str(out), gate=str(gate))
    wait_until(lambda: out.exists() and "start" in out.read_text(), what="the task's start")
    assert _session(a.proc.pid) - {a.proc.pid}, "no pool process"
    try:
        os.kill(a.proc.pid, signal.SIGKILL)
        a.proc.wait(10)
        wait_until(lambda: not _session(a.proc.pid), what="the pool's end")
    finally:
        gate.touch()  # a pool process left behind ends its task and can be reaped
