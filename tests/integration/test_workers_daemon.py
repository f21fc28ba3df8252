"""Pull workers against a real daemon, with real ``jobctl worker`` processes (issue 16,
docs/workers.md): a task runs once and completes; an exception is retried, then dead,
with the traceback; a worker stopped (SIGSTOP) past its lease loses the job to another
worker, and its late complete is refused (409) and discarded: the job ran twice at most
and one success is recorded; a worker killed with SIGKILL loses its lease to the reaper;
SIGTERM lets the running task finish and answer, and releases a leased task not yet
started. Leases last 2 s here."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobctl.client import Client
from jobctl.tasks import App, Deferred
from jobctl.worker import Worker, WorkerConfig
from tests.integration.conftest import DaemonProc, daemon_env, wait_until
from tests.workers import app_tasks

ROOT = Path(__file__).resolve().parents[2]


class WorkerProc:
    """``jobctl worker`` in its own session (so a signal can reach its pool too)."""

    def __init__(self, d: DaemonProc, *args: str) -> None:
        env = daemon_env() | {"JOBCTL_SOCKET": str(d.socket), "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobctl", "worker", "--app", "tests.workers.app_tasks",
             "--queue", "wq", "--lease-ttl", "2", "--wait", "1", "--grace", "10", *args],
            env=env, cwd=ROOT, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            start_new_session=True,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for(self, fragment: str, timeout: float = 30) -> str:
        for seen in self.log:
            if fragment in seen:
                return seen
        while True:
            line = self.lines.get(timeout=timeout)
            self.log.append(line)
            if fragment in line:
                return line

    def group(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.group(signal.SIGCONT)
            self.group(signal.SIGKILL)
        self.proc.wait(10)
        self._pump_thread.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@pytest.fixture
def workers(make_daemon: Callable[..., DaemonProc]) -> Iterator[Callable[..., WorkerProc]]:
    made: list[WorkerProc] = []
    d = make_daemon()
    app_tasks.app.socket = d.socket

    def start(*args: str) -> WorkerProc:
        w = WorkerProc(d, *args)
        made.append(w)
        return w

    start.daemon = d  # type: ignore[attr-defined]
    yield start
    for w in made:
        w.stop()


def _job(d: DaemonProc, job_id: int) -> dict[str, Any]:
    return d.client().get(job_id)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_task_runs_once_and_completes(workers: Callable[..., WorkerProc], tmp_path: Path) -> None:
    d: DaemonProc = workers.daemon  # type: ignore[attr-defined]
    out = tmp_path / "out"
    w = workers("--concurrency", "2")
    first = app_tasks.record.defer(path=str(out), n=21, key="r-21")
    assert isinstance(first, Deferred) and first.key == "r-21"
    assert app_tasks.record.defer(path=str(out), n=21, key="r-21") == first  # idempotent
    later = app_tasks.arecord.defer(path=str(out), n=1)
    wait_until(lambda: _job(d, first.job_id)["status"] == "succeeded", what="the task")
    wait_until(lambda: _job(d, later.job_id)["status"] == "succeeded", what="the async task")
    job = _job(d, first.job_id)
    assert [a["outcome"] for a in job["attempts"]] == ["succeeded"]
    assert job["attempts"][0]["output_tail"] == "42"
    assert job["payload"]["task"] == "tests.workers.app_tasks:record"
    assert sorted(x.split()[0] for x in _lines(out)) == ["async", "run"]
    w.wait_for("event=completed")


def test_an_exception_is_retried_then_dead_with_its_traceback(
    workers: Callable[..., WorkerProc], tmp_path: Path
) -> None:
    d: DaemonProc = workers.daemon  # type: ignore[attr-defined]
    out = tmp_path / "out"
    workers()
    job_id = app_tasks.boom.defer(path=str(out)).job_id
    wait_until(lambda: _job(d, job_id)["status"] == "dead", what="the death")
    job = _job(d, job_id)
    assert [a["outcome"] for a in job["attempts"]] == ["failed", "failed"]
    assert job["dead_reason"] == "max_attempts"
    assert "ValueError: boom!" in job["last_error"] and "Traceback" in job["last_error"]
    assert _lines(out) == ["boom", "boom"]


def test_a_stopped_worker_loses_its_job_and_its_late_complete_is_refused(
    workers: Callable[..., WorkerProc], tmp_path: Path
) -> None:
    d: DaemonProc = workers.daemon  # type: ignore[attr-defined]
    out, gate = tmp_path / "out", tmp_path / "gate"
    a = workers("--concurrency", "1")
    job_id = app_tasks.gated.defer(path=str(out), gate=str(gate)).job_id
    wait_until(lambda: len(_lines(out)) == 1, what="the first run")
    a.group(signal.SIGSTOP)  # past its lease: no heartbeat, no answer
    b = workers("--concurrency", "1")
    wait_until(lambda: len(_lines(out)) == 2, what="the second worker's run")
    gate.touch()
    wait_until(lambda: _job(d, job_id)["status"] == "succeeded", what="the second run's success")
    a.group(signal.SIGCONT)
    line = a.wait_for("result=discarded")
    assert f"job={job_id} gen=1" in line
    job = _job(d, job_id)
    assert [x["outcome"] for x in job["attempts"]] == ["lease_expired", "succeeded"]
    assert _lines(out).count("done") == 2 and len(_lines(out)) == 4  # ran twice, no more
    b.wait_for("event=completed")


def test_a_killed_worker_loses_its_lease_to_the_reaper(
    workers: Callable[..., WorkerProc], tmp_path: Path
) -> None:
    d: DaemonProc = workers.daemon  # type: ignore[attr-defined]
    out, gate = tmp_path / "out", tmp_path / "gate"
    a = workers("--concurrency", "1")
    job_id = app_tasks.gated.defer(path=str(out), gate=str(gate)).job_id
    wait_until(lambda: len(_lines(out)) == 1, what="the first run")
    a.group(signal.SIGKILL)
    gate.touch()
    workers("--concurrency", "1")
    wait_until(lambda: _job(d, job_id)["status"] == "succeeded", what="the rerun")
    assert [x["outcome"] for x in _job(d, job_id)["attempts"]] == ["lease_expired", "succeeded"]


def test_sigterm_lets_the_running_task_finish(
    workers: Callable[..., WorkerProc], tmp_path: Path
) -> None:
    d: DaemonProc = workers.daemon  # type: ignore[attr-defined]
    out, gate = tmp_path / "out", tmp_path / "gate"
    a = workers("--concurrency", "1")
    job_id = app_tasks.gated.defer(path=str(out), gate=str(gate)).job_id
    wait_until(lambda: len(_lines(out)) == 1, what="the run")
    a.proc.send_signal(signal.SIGTERM)
    a.wait_for("event=draining")
    gate.touch()
    assert a.proc.wait(20) == 0
    assert _job(d, job_id)["status"] == "succeeded"
    assert [x["outcome"] for x in _job(d, job_id)["attempts"]] == ["succeeded"]
    a.wait_for("event=worker_stopped")


def test_defer_at_waits_for_its_time(workers: Callable[..., WorkerProc], tmp_path: Path) -> None:
    d: DaemonProc = workers.daemon  # type: ignore[attr-defined]
    out = tmp_path / "out"
    workers()
    when = datetime.now(UTC) + timedelta(seconds=1.5)
    job_id = app_tasks.record.defer_at(when, path=str(out), n=1).job_id
    wait_until(lambda: _job(d, job_id)["status"] == "succeeded", what="the deferred run")
    [attempt] = _job(d, job_id)["attempts"]
    assert datetime.fromisoformat(attempt["started_at"]) >= when - timedelta(milliseconds=1)


def test_periodic_tasks_are_created_then_updated(
    workers: Callable[..., WorkerProc], tmp_path: Path
) -> None:
    d: DaemonProc = workers.daemon  # type: ignore[attr-defined]
    app = App(socket=d.socket)

    @app.periodic(cron="0 6 * * *", tz="Asia/Tokyo", queue="wq", name="tokyo-report")
    def report() -> None: ...

    assert app.register() == ["tokyo-report"]
    app.schedules[0] = dataclasses.replace(app.schedules[0], cron="0 7 * * *")
    assert app.register() == ["tokyo-report"]  # updated, not a name conflict
    shown = d.client().schedule("tokyo-report")
    assert shown["cron"] == "0 7 * * *" and shown["tz"] == "Asia/Tokyo"
    assert shown["job"]["payload"]["task"].endswith("<locals>.report")
    assert shown["job"]["queue"] == "wq"


def test_a_long_poll_is_woken_by_an_enqueue_not_its_timeout(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    d = make_daemon()
    got: list[list[dict[str, Any]]] = []
    with Client(d.socket, timeout=60) as c:
        assert c.lease(["wq"], 1, 0) == []  # nothing due: answered at once
        poll = threading.Thread(target=lambda: got.append(c.lease(["wq"], 1, wait=50)))
        began = time.monotonic()
        poll.start()
        time.sleep(0.3)  # the request reaches its wait (if not, it finds the job at once)
        job = d.client().enqueue({"payload": {"n": 1}, "queue": "wq"})
        poll.join(45)
        took = time.monotonic() - began
    assert [x["id"] for x in got[0]] == [job["id"]]
    assert took < 45, took  # woken by the enqueue's tick, well before its 50 s wait


def test_sigterm_releases_a_leased_task_not_yet_started(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    """The drain (what SIGTERM runs) cancels a task still waiting for a pool slot and
    gives its lease back: due again at once, no attempt of its budget used (before the
    release route it was failed as a broken pool, an attempt used)."""
    d = make_daemon()
    job = d.client().enqueue({"payload": {"task": "x:y"}, "queue": "wq", "max_attempts": 1})
    cfg = WorkerConfig(app="tests.workers.app_tasks", queues=["wq"], socket=d.socket)
    worker = Worker(cfg)
    pool = cf.ThreadPoolExecutor(1)  # its one thread busy: the task below waits, unstarted
    gate = threading.Event()
    busy = pool.submit(gate.wait, 30)
    worker._pool = pool
    sender = threading.Thread(target=worker._send_loop, daemon=True)  # sends the release
    sender.start()
    with Client(d.socket) as c:
        [lease] = c.lease(["wq"], 1, 0, 30)
    with worker.lock:
        worker._start(lease)
    worker.held[lease["id"]].future.add_done_callback(lambda f: gate.set())
    worker.stopping.set()
    worker._drain(pool, sender)
    assert busy.result() is True
    shown = _job(d, job["id"])
    assert shown["status"] == "scheduled" and shown["failures"] == 0, shown
    assert [a["outcome"] for a in shown["attempts"]] == ["interrupted"]
    with Client(d.socket) as c:
        [again] = c.lease(["wq"], 1, 0, 30)  # due at once, budget intact
    assert again["generation"] == lease["generation"] + 1
