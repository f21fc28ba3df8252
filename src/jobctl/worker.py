"""``jobctl worker``: run the ``@task`` functions of an app in a process pool, fed by
leases over the API (docs/workers.md).

One thread leases (a long-poll, so an idle worker costs the daemon nothing), the pool runs
the tasks (``concurrency`` processes, started by a fork server: the app is imported in
each once), a second thread heartbeats every lease held, and the answers go back with
the lease's generation:

* a task that returns: ``complete`` with its result (JSON; else its ``repr``);
* a task that raises: ``fail`` with the traceback's text, retryable (the job's backoff
  and ``max_attempts`` decide the rest); a payload naming no task of the app: not
  retryable;
* a lease lost meanwhile (a heartbeat or the answer gets 409 ``LeaseLost``: the worker
  was stopped past its lease and the job went to another): the result is discarded and
  logged; the job ran at most twice and one success is recorded.

SIGTERM or SIGINT: stop leasing, release the leases whose task has not started (``POST
/v1/leases/{id}/release``: due again at once, no attempt used), give the running tasks
``grace`` seconds to finish and answer, then stop the pool and let the other leases lapse
(the daemon's reaper reclaims them at their ``lease_until``, like an executor's).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import importlib
import json
import logging
import multiprocessing
import signal
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobctl.client import Client
from jobctl.errors import DaemonUnavailable, InvalidInput, JobctlError, LeaseLost
from jobctl.tasks import App, is_async
from jobctl.tasks import app as default_app

log = logging.getLogger("jobctl.worker")
#: Seconds between lease attempts after the daemon could not be reached.
RETRY_PAUSE = 1.0


def load_app(ref: str) -> App:
    """``module[:attr]``: the module is imported (its decorators register tasks); its
    ``attr`` (default ``app``) is the App, or the default app if it has none."""
    module, _, attr = ref.partition(":")
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise InvalidInput(f"--app {ref}: cannot import {module}: {exc}") from None
    found = getattr(mod, attr or "app", None)
    if isinstance(found, App):
        return found
    if attr:
        raise InvalidInput(f"--app {ref}: {attr} is not a jobctl.tasks.App")
    return default_app


_APPS: dict[str, App] = {}


class Interrupted(Exception):
    """A stop signal arrived during a long-poll."""


def run_task(app_ref: str, name: str, kwargs: dict[str, Any]) -> tuple[bool, Any, bool]:
    """In a pool process: run one task. (ok, result or traceback text, retryable)."""
    try:
        app = _APPS.get(app_ref) or _APPS.setdefault(app_ref, load_app(app_ref))
        task = app.find(name)
    except Exception:  # an unknown task: no retry can mend it
        return False, traceback.format_exc(), False
    try:
        result = asyncio.run(task.fn(**kwargs)) if is_async(task.fn) else task.fn(**kwargs)
    except BaseException:  # the task's failure is the job's: reported, never raised here
        return False, traceback.format_exc(), True
    try:
        json.dumps(result)
    except (TypeError, ValueError):
        result = repr(result)
    return True, result, True


@dataclass
class Held:
    """A lease this worker holds and the task running for it."""

    job_id: int
    generation: int
    future: cf.Future[tuple[bool, Any, bool]]
    lost: bool = False


@dataclass
class WorkerConfig:
    app: str
    queues: list[str]
    socket: Path
    concurrency: int = 4
    lease_ttl: float = 30.0
    wait: float = 10.0
    grace: float = 30.0


@dataclass
class Worker:
    config: WorkerConfig
    stopping: threading.Event = field(default_factory=threading.Event)
    held: dict[int, Held] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Notified (under ``lock``) when an answer frees a slot.
    slot_freed: threading.Condition = field(init=False)
    done: int = 0
    #: The main thread waits in a long-poll (a stop signal interrupts it).
    leasing: bool = False
    _beat_pause: threading.Event = field(default_factory=threading.Event)  # never set
    answers: cf.ThreadPoolExecutor = field(
        default_factory=lambda: cf.ThreadPoolExecutor(4, thread_name_prefix="answer")
    )

    def __post_init__(self) -> None:
        self.slot_freed = threading.Condition(self.lock)

    def client(self, timeout: float = 30.0) -> Client:
        return Client(self.config.socket, timeout=timeout)

    def run(self) -> int:
        """Lease and run until stopped; returns the process's exit status."""
        cfg = self.config
        app = load_app(cfg.app)  # fail fast (a bad --app) before leasing anything
        if not app.tasks:
            raise InvalidInput(f"--app {cfg.app}: it has no @task functions")
        if app.socket is None:
            app.socket = cfg.socket
        if app.schedules:
            log.info("event=registered schedules=%s", ",".join(app.register()))
        ctx = multiprocessing.get_context("forkserver")
        pool = cf.ProcessPoolExecutor(cfg.concurrency, mp_context=ctx)
        beat = threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True)
        beat.start()
        log.info("event=worker_started queues=%s concurrency=%s", cfg.queues, cfg.concurrency)
        try:
            self._lease_loop(pool)
        finally:
            self._drain(pool)
        log.info("event=worker_stopped done=%s", self.done)
        return 0

    def _free(self) -> int:
        with self.lock:
            return self.config.concurrency - len(self.held)

    def _wait_for_slot(self) -> int:
        """Free slots, once there is one (an answer sent frees its slot and says so)."""
        with self.slot_freed:
            if len(self.held) >= self.config.concurrency:
                self.slot_freed.wait(0.5)  # woken at once by an answer; 0.5: see a stop
            return self.config.concurrency - len(self.held)

    def _lease_loop(self, pool: cf.ProcessPoolExecutor) -> None:
        cfg = self.config
        with self.client(timeout=cfg.wait + 30) as c:
            while not self.stopping.is_set():
                free = self._wait_for_slot()
                if free <= 0:
                    continue
                try:
                    self.leasing = True
                    leases = c.lease(cfg.queues, free, cfg.wait, cfg.lease_ttl)
                except Interrupted:
                    break
                except DaemonUnavailable as exc:
                    log.warning("event=lease_failed error=%s", exc)
                    self.stopping.wait(RETRY_PAUSE)
                    continue
                finally:
                    self.leasing = False
                for lease in leases:
                    if self.stopping.is_set():  # SIGTERM while the answer came: not started
                        self._release(c, lease["id"], lease["generation"])
                    else:
                        self._start(pool, lease)
        log.info("event=stopping running=%s", len(self.held))

    def _start(self, pool: cf.Executor, lease: dict[str, Any]) -> None:
        payload = lease.get("payload") or {}
        name = payload.get("task", "") if isinstance(payload, dict) else ""
        kwargs = payload.get("kwargs", {}) if isinstance(payload, dict) else {}
        fut = pool.submit(run_task, self.config.app, str(name), dict(kwargs))
        held = Held(lease["id"], lease["generation"], fut)
        with self.lock:
            self.held[held.job_id] = held
        log.info(
            "event=started job=%s attempt=%s gen=%s task=%s",
            held.job_id,
            lease["attempt"],
            held.generation,
            name,
        )
        # answered on a thread of its own: a pool's callbacks run on its result thread,
        # which a request to the daemon must not hold up
        fut.add_done_callback(lambda f: self.answers.submit(self._answer, held))

    def _release(self, c: Client, job_id: int, generation: int) -> None:
        """Give back a lease whose task never started (no attempt of its budget used)."""
        try:
            c.release(job_id, generation)
            log.info("event=released job=%s gen=%s", job_id, generation)
        except JobctlError as exc:  # lost meanwhile, or the daemon gone: it lapses
            log.warning("event=release_failed job=%s gen=%s error=%s", job_id, generation, exc)

    def _answer(self, held: Held) -> None:
        """Send a finished task's outcome (on a pool thread, once per task); a task
        cancelled before it started (the drain) is released instead."""
        if held.future.cancelled():
            try:
                with self.client() as c:
                    self._release(c, held.job_id, held.generation)
            finally:
                self._freed(held)
            return
        try:
            ok, value, retryable = held.future.result()
        except BaseException as exc:  # the pool broke (a process killed, a shutdown)
            ok, value, retryable = False, f"worker pool: {exc!r}", True
        try:
            with self.client() as c:
                if ok:
                    c.complete(held.job_id, held.generation, value)
                else:
                    c.fail(held.job_id, held.generation, str(value), retryable)
            log.info(
                "event=%s job=%s gen=%s",
                "completed" if ok else "failed",
                held.job_id,
                held.generation,
            )
        except LeaseLost:
            log.warning(
                "event=lease_lost job=%s gen=%s result=discarded", held.job_id, held.generation
            )
        except JobctlError as exc:
            log.error("event=answer_failed job=%s error=%s", held.job_id, exc)
        finally:
            self._freed(held)

    def _freed(self, held: Held) -> None:
        with self.slot_freed:
            self.held.pop(held.job_id, None)
            self.done += 1
            self.slot_freed.notify()

    def _heartbeats(self) -> None:
        every = self.config.lease_ttl / 3
        while True:
            with self.lock:
                todo = [h for h in self.held.values() if not h.lost]
            for h in todo:
                try:
                    with self.client() as c:
                        c.heartbeat(h.job_id, h.generation, self.config.lease_ttl)
                except LeaseLost:
                    h.lost = True
                    log.warning("event=lease_lost job=%s gen=%s", h.job_id, h.generation)
                except JobctlError as exc:
                    log.warning("event=heartbeat_failed job=%s error=%s", h.job_id, exc)
            self._beat_pause.wait(every)

    def _drain(self, pool: cf.Executor) -> None:
        """Give running tasks ``grace`` seconds, then stop the pool (their leases lapse)."""
        with self.lock:
            futures = [h.future for h in self.held.values()]
        for f in futures:
            f.cancel()  # not started yet: its done callback releases the lease
        if futures:
            log.info("event=draining running=%s grace=%s", len(futures), self.config.grace)
            _, late = cf.wait(futures, timeout=self.config.grace)
            if late:
                log.warning("event=grace_over abandoned=%s (their leases lapse)", len(late))
                with self.lock:
                    self.held.clear()
                _kill_pool(pool)
                return
            # the answers run in done callbacks: wait until each is sent
            while self._free() < self.config.concurrency:
                self.stopping.wait(0.01)
        pool.shutdown(wait=True, cancel_futures=True)
        self.answers.shutdown(wait=True)


def _kill_pool(pool: cf.Executor) -> None:
    procs = list(getattr(pool, "_processes", {}).values())
    for p in procs:
        p.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def install_signals(worker: Worker) -> Callable[[], None]:
    """SIGTERM and SIGINT stop leasing (the drain follows); returns an undo."""

    def stop(signum: int, frame: object) -> None:
        worker.stopping.set()
        if worker.leasing:  # a long-poll in flight: leave it (what it got lapses)
            raise Interrupted

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}

    def undo() -> None:
        for s, h in old.items():
            signal.signal(s, h)

    return undo


__all__ = ["Worker", "WorkerConfig", "load_app", "run_task"]
