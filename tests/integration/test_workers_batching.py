"""A busy ``jobctl worker`` sends its outcomes in batches (docs/workers.md): with a queue
of tasks waiting, the outcomes ride in lease requests' ``finish`` lists, several per
request, and no single-job complete is sent (the worker before issue 16's batching sent
one complete per task). Real daemon, real worker processes; the audit trail counts the
requests."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from tests.integration.conftest import DaemonProc, wait_until
from tests.integration.test_workers_daemon import WorkerProc, workers  # noqa: F401
from tests.workers import app_tasks

TASKS = 40


def _finished_ids(d: DaemonProc) -> tuple[list[int], int, int]:
    """(job ids in lease requests' finish lists, those requests, single completes)."""
    records = d.client().audit(limit=1000)
    ids: list[int] = []
    batches = 0
    for r in records:
        target = r["target"]
        if r["action"] == "leases.create" and target.startswith("finish "):
            batches += 1
            if m := re.fullmatch(r"finish job:(\d+)", target):
                ids.append(int(m[1]))
            elif m := re.fullmatch(r"finish jobs:(\d+)\.\.(\d+) n=(\d+)", target):
                ids.extend([int(m[1])] * int(m[3]))  # the count is what is checked
    singles = sum(r["action"] == "leases.complete" for r in records)
    return ids, batches, singles


def test_a_busy_worker_sends_its_outcomes_in_batches(
    workers: Callable[..., WorkerProc],  # noqa: F811
    tmp_path: Path,
) -> None:
    d: DaemonProc = workers.daemon  # type: ignore[attr-defined]
    out = tmp_path / "out"
    jobs = [app_tasks.record.defer(path=str(out), n=i).job_id for i in range(TASKS)]
    workers("--concurrency", "2")

    def all_done() -> bool:
        return all(d.client().get(j)["status"] == "succeeded" for j in jobs)

    wait_until(all_done, what="the drain")
    wait_until(lambda: len(_finished_ids(d)[0]) == TASKS, what="the audit records")
    _, batches, singles = _finished_ids(d)
    assert singles == 0
    assert batches < TASKS, f"{batches} requests for {TASKS} outcomes: no batching"
