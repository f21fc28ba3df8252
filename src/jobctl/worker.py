"""``jobctl worker``: run the ``@task`` functions of an app in a process pool, fed by
leases over the API (docs/workers.md).

One thread leases (a long-poll, so an idle worker costs the daemon nothing), the pool runs
the tasks (``concurrency`` processes, forked with the app imported: :func:`start_pool`),
a second thread heartbeats every lease held, and the answers go back with the lease's
generation:

* a task that returns: ``complete`` with its result (JSON; else its ``repr``);
* a task that raises: ``fail`` with the traceback's text, retryable (the job's backoff
  and ``max_attempts`` decide the rest); a payload naming no task of the app: not
  retryable;
* a lease lost meanwhile (a heartbeat or the answer gets 409 ``LeaseLost``: the worker
  was stopped past its lease and the job went to another): the result is discarded and
  logged; the job ran at most twice and one success is recorded.

SIGTERM or SIGINT: stop leasing (a long-poll in flight is half-closed: the daemon answers
it at once and grants nothing more), release the leases whose task has not started (``POST
/v1/leases/{id}/release``: due again at once, no attempt used; the prefetched ones
included, and any the long-poll's answer carried), give the running tasks ``grace``
seconds to finish and answer, then stop the pool and let the other leases lapse (the
daemon's reaper reclaims them at their ``lease_until``, like an executor's).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import ctypes
import importlib
import json
import logging
import multiprocessing
import os
import signal
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobctl.client import Client
from jobctl.domain.workers import MAX_LEASES
from jobctl.errors import DaemonUnavailable, InvalidInput, JobctlError, LeaseLost
from jobctl.tasks import App, is_async
from jobctl.tasks import app as default_app

log = logging.getLogger("jobctl.worker")
#: Seconds between lease attempts after the daemon could not be reached.
RETRY_PAUSE = 1.0
#: The text of a failure sent (the daemon keeps its last 4 KiB).
MAX_ERROR = 16 * 1024
#: prctl(2): the signal a process gets when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


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
        json.dumps(result, allow_nan=False)  # what the daemon takes as a result
    except (TypeError, ValueError):
        result = repr(result)
    return True, result, True


@dataclass
class Held:
    """A lease this worker holds and the task running (or queued in the pool) for it."""

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
    #: Leases held beyond ``concurrency``, queued in the pool: a process that ends a task
    #: starts the next at once instead of waiting for a round trip to the daemon, and
    #: the outcomes go back in batches. Default (None): 3 x ``concurrency``, so 4 x in
    #: all, like Celery's default prefetch multiplier of 4.
    prefetch: int | None = None

    @property
    def capacity(self) -> int:
        """Leases held at most (running and queued)."""
        extra = 3 * self.concurrency if self.prefetch is None else self.prefetch
        return min(self.concurrency + extra, MAX_LEASES)


@dataclass
class Worker:
    """Two threads talk to the daemon: the main one long-polls for work while slots are
    free, and the sender sends every outcome ready in one request that also leases as
    many jobs as it frees ("complete these, lease N more"), so a busy worker makes about
    one request per batch of tasks, not two per task."""

    config: WorkerConfig
    stopping: threading.Event = field(default_factory=threading.Event)
    held: dict[int, Held] = field(default_factory=dict)
    #: Reentrant: a task already done when queued calls back at once, under the lock.
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: Notified (under ``lock``) when an outcome is ready or the leases held change.
    changed: threading.Condition = field(init=False)
    #: Finished tasks whose outcome is not sent yet: (held, ok, result or text, retryable).
    outbox: list[tuple[Held, bool, Any, bool]] = field(default_factory=list)
    #: Leases to give back unrun (a task cancelled before it started, a lease that came
    #: after the stop signal): the sender releases them.
    releases: list[Held] = field(default_factory=list)
    #: Slots a lease request in flight may fill (never more than ``capacity`` in all).
    reserved: int = 0
    done: int = 0
    #: The main thread's connection, for its long-polls (a stop signal hangs it up).
    poller: Client | None = None
    #: Past the grace period: outcomes still to come are dropped (their leases lapse).
    abandoned: bool = False
    _beat_pause: threading.Event = field(default_factory=threading.Event)  # never set
    _pool: cf.Executor | None = None

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

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
        self._pool = pool = start_pool(cfg)  # before this process starts any thread
        beat = threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True)
        beat.start()
        sender = threading.Thread(target=self._send_loop, name="sender", daemon=True)
        sender.start()
        log.info("event=worker_started queues=%s concurrency=%s", cfg.queues, cfg.concurrency)
        try:
            self._lease_loop()
        finally:
            self._drain(pool, sender)
        log.info("event=worker_stopped done=%s", self.done)
        return 0

    def stop(self) -> None:
        """Stop leasing (from a signal handler, on the main thread): a long-poll in
        flight is half-closed, so the daemon ends it at once and grants nothing more;
        the leases its answer may still carry are released (``_took``). Why not drop
        the request: the daemon would grant leases to a connection nobody reads, and
        they would lapse at ``lease_until``, each using an attempt."""
        self.stopping.set()
        if self.poller is not None:
            self.poller.hang_up()

    def _free(self) -> int:
        """Slots no lease holds or may soon fill (under ``lock``)."""
        return self.config.capacity - len(self.held) - self.reserved

    def _lease_loop(self) -> None:
        """Long-poll for work while slots are free (the sender leases while busy)."""
        cfg = self.config
        with self.client(timeout=cfg.wait + 30) as c:
            self.poller = c
            if self.stopping.is_set():  # a signal before ``poller`` was set
                c.hang_up()
            while not self.stopping.is_set():
                with self.changed:
                    if self._free() <= 0:
                        self.changed.wait(0.5)  # woken by the sender; 0.5: see a stop
                        continue
                    want = self._free()
                    self.reserved += want
                self._took(want, self._poll(c, want))
            self.poller = None
        log.info("event=stopping running=%s", len(self.held))

    def _poll(self, c: Client, want: int) -> list[dict[str, Any]]:
        """One long-poll for up to ``want`` leases; a stop signal ends it early."""
        cfg = self.config
        try:
            return c.lease(cfg.queues, want, cfg.wait, cfg.lease_ttl)
        except DaemonUnavailable as exc:
            if not self.stopping.is_set():  # hung up before the request went out: no lease
                log.warning("event=lease_failed error=%s", exc)
                self.stopping.wait(RETRY_PAUSE)
            return []

    def _took(self, reserved: int, leases: list[dict[str, Any]]) -> None:
        """Give back a request's reservation and start the jobs it leased."""
        with self.changed:
            self.reserved -= reserved
            for lease in leases:
                if self.stopping.is_set():  # SIGTERM while the answer came: not started
                    gone: cf.Future[tuple[bool, Any, bool]] = cf.Future()
                    gone.cancel()
                    held = self.held[lease["id"]] = Held(lease["id"], lease["generation"], gone)
                    self.releases.append(held)
                else:
                    self._start(lease)
            self.changed.notify_all()

    def _start(self, lease: dict[str, Any]) -> None:
        """Queue a leased job's task in the pool (under ``lock``)."""
        assert self._pool is not None
        payload = lease.get("payload") or {}
        name = payload.get("task", "") if isinstance(payload, dict) else ""
        kwargs = payload.get("kwargs", {}) if isinstance(payload, dict) else {}
        fut = self._pool.submit(run_task, self.config.app, str(name), dict(kwargs))
        held = Held(lease["id"], lease["generation"], fut)
        self.held[held.job_id] = held
        log.debug(
            "event=started job=%s attempt=%s gen=%s task=%s",
            held.job_id,
            lease["attempt"],
            held.generation,
            name,
        )
        fut.add_done_callback(lambda f: self._finished(held))

    def _finished(self, held: Held) -> None:
        """A task ended (on the pool's result thread): its outcome waits for the sender;
        one cancelled before it started (the drain) is released instead."""
        if held.future.cancelled():
            with self.changed:
                self.releases.append(held)
                self.changed.notify_all()
            return
        try:
            ok, value, retryable = held.future.result()
        except BaseException as exc:  # the pool broke (a process killed, a shutdown)
            ok, value, retryable = False, f"worker pool: {exc!r}", True
        with self.changed:
            if self.abandoned:
                return
            self.outbox.append((held, ok, value, retryable))
            self.changed.notify_all()

    def _send_loop(self) -> None:
        """Send the outcomes ready, all in one request that leases as many jobs as they
        free (none once stopping); while it is in flight the next outcomes gather."""
        with self.client() as c:
            while True:
                with self.changed:
                    while not self.outbox and not self.releases:
                        self.changed.wait()
                    back, self.releases = self.releases, []
                    batch, self.outbox = self.outbox, []
                    want = 0 if self.stopping.is_set() else max(0, self._free() + len(batch))
                    self.reserved += want
                for held in back:
                    self._release(c, held)
                if batch or want:
                    self._send(c, batch, want)
                else:
                    self._answered([], 0, [])

    def _send(self, c: Client, batch: list[tuple[Held, bool, Any, bool]], want: int) -> None:
        """One request: these outcomes, and up to ``want`` leases more."""
        cfg = self.config
        items = [_outcome(h, ok, value, retryable) for h, ok, value, retryable in batch]
        leases: list[dict[str, Any]] = []
        try:
            leases, answers = c.finish_and_lease(cfg.queues, items, want, 0, cfg.lease_ttl)
            for (held, *_), item, answer in zip(batch, items, answers, strict=True):
                _log_answer(held, item, answer)
        except DaemonUnavailable as exc:  # the daemon is back soon: send them again
            log.warning("event=answer_failed error=%s (retrying)", exc)
            if self.stopping.is_set():  # not after a stop: their leases lapse
                self._answered(batch, want, [])
                return
            with self.changed:
                self.reserved -= want
                self.outbox[:0] = batch
            self.stopping.wait(RETRY_PAUSE)
            return
        except JobctlError as exc:  # the request refused as a whole: one by one
            log.warning("event=batch_refused error=%s (answering one by one)", exc)
            for (held, *_), item in zip(batch, items, strict=True):
                self._answer_one(c, held, item)
        self._answered(batch, want, leases)

    def _answered(
        self, batch: list[tuple[Held, bool, Any, bool]], reserved: int, leases: list[Any]
    ) -> None:
        with self.changed:
            for held, *_ in batch:
                self.held.pop(held.job_id, None)
            self.done += len(batch)
            self._took(reserved, leases)

    def _release(self, c: Client, held: Held) -> None:
        """Give back a lease whose task never ran (no attempt of its budget used)."""
        try:
            if held.lost:
                log.warning("event=lease_lost job=%s gen=%s", held.job_id, held.generation)
            else:
                c.release(held.job_id, held.generation)
                log.info("event=released job=%s gen=%s", held.job_id, held.generation)
        except JobctlError as exc:  # lost meanwhile, or the daemon gone: it lapses
            log.warning(
                "event=release_failed job=%s gen=%s error=%s", held.job_id, held.generation, exc
            )
        finally:
            with self.changed:
                self.held.pop(held.job_id, None)
                self.changed.notify_all()

    def _answer_one(self, c: Client, held: Held, item: dict[str, Any]) -> None:
        """The single-job route, for an outcome a batch could not carry."""
        try:
            if item["outcome"] == "complete":
                c.complete(held.job_id, held.generation, item["result"])
            else:
                c.fail(held.job_id, held.generation, item["error"], item["retryable"])
            _log_answer(held, item, {})
        except LeaseLost:
            _log_answer(held, item, {"error": {"code": "lease_lost"}})
        except JobctlError as exc:
            log.error("event=answer_failed job=%s error=%s", held.job_id, exc)

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
                    h.future.cancel()  # still queued: it need not run (another may run it)
                    log.warning("event=lease_lost job=%s gen=%s", h.job_id, h.generation)
                except JobctlError as exc:
                    log.warning("event=heartbeat_failed job=%s error=%s", h.job_id, exc)
            self._beat_pause.wait(every)

    def _drain(self, pool: cf.Executor, sender: threading.Thread) -> None:
        """Release the tasks not started, give the running ones ``grace`` seconds, then
        stop the pool (the leases of those still running lapse)."""
        with self.lock:
            futures = [h.future for h in self.held.values()]
        for f in futures:
            f.cancel()  # not started yet: the sender releases its lease
        if futures:
            log.info("event=draining running=%s grace=%s", len(futures), self.config.grace)
            _, late = cf.wait(futures, timeout=self.config.grace)
            if late:
                log.warning("event=grace_over abandoned=%s (their leases lapse)", len(late))
                with self.lock:
                    self.abandoned = True
                    self.held.clear()
                _kill_pool(pool)
                return
            with self.changed:  # every outcome is in the outbox: wait until each is sent
                while self.held and sender.is_alive():
                    self.changed.wait(0.5)
        pool.shutdown(wait=True, cancel_futures=True)


def start_pool(cfg: WorkerConfig) -> cf.ProcessPoolExecutor:
    """The pool, its processes started now. Forked from this process (the app already
    imported: each is ready in milliseconds) while it has a single thread, which makes
    the fork safe (no lock can be held by a thread that does not exist in the child);
    call it before starting any. If the app started threads at import (a client
    library's), a fork server instead: a fresh interpreter that imports the worker and
    the app once, then forks each process (~0.5 s of CPU before the first task on two
    busy cores, the bulk of a short run's start: docs/benchmarks.md)."""
    if _single_threaded():
        fork = multiprocessing.get_context("fork")
        pool = cf.ProcessPoolExecutor(
            cfg.concurrency, mp_context=fork, initializer=_pool_child, initargs=(os.getpid(),)
        )
        pool.submit(int).result()  # forks every process now (fork: all at the first submit)
        return pool
    server = multiprocessing.get_context("forkserver")
    server.set_forkserver_preload([__name__, cfg.app.partition(":")[0]])
    return cf.ProcessPoolExecutor(cfg.concurrency, mp_context=server, initializer=_pool_child)


def _single_threaded() -> bool:
    """No thread but this one: Python's, and the kernel's count (a C library's threads,
    which ``threading`` does not see, would make a fork as unsafe)."""
    try:
        tasks = len(os.listdir("/proc/self/task"))
    except OSError:  # no /proc: Python's count alone
        tasks = 1
    return threading.active_count() == 1 and tasks == 1


def _pool_child(parent: int | None = None) -> None:
    """A pool process dies with its parent (the worker, or the fork server, which ends
    with the worker): else a worker killed alone leaves its forked pool waiting forever
    on a call queue whose write end the pool holds too (``PR_SET_PDEATHSIG``, which the
    forking thread's end fires: the main thread's here; ``parent``: the pid it was
    forked from, gone already if it differs now). A forked process's signals are a fork
    server child's: the worker's stop handler is the parent's, not its own."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: no such call
        return
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the worker died before the call above


def _outcome(held: Held, ok: bool, value: Any, retryable: bool) -> dict[str, Any]:
    """A finished task as an item of a lease request's ``finish`` list."""
    if ok:
        return {"id": held.job_id, "generation": held.generation, "outcome": "complete",
                "result": value}  # fmt: skip
    return {"id": held.job_id, "generation": held.generation, "outcome": "fail",
            "error": str(value)[-MAX_ERROR:], "retryable": retryable}  # fmt: skip


def _log_answer(held: Held, item: dict[str, Any], answer: dict[str, Any]) -> None:
    """One line per outcome sent: what the daemon did with it."""
    code = (answer.get("error") or {}).get("code")
    if code == "lease_lost":
        log.warning("event=lease_lost job=%s gen=%s result=discarded", held.job_id, held.generation)
    elif code is not None:
        log.error("event=answer_failed job=%s error=%s", held.job_id, code)
    else:
        event = "completed" if item["outcome"] == "complete" else "failed"
        log.info("event=%s job=%s gen=%s", event, held.job_id, held.generation)


def _kill_pool(pool: cf.Executor) -> None:
    procs = list(getattr(pool, "_processes", {}).values())
    for p in procs:
        p.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def install_signals(worker: Worker) -> Callable[[], None]:
    """SIGTERM and SIGINT stop leasing (the drain follows); returns an undo."""

    def stop(signum: int, frame: object) -> None:
        worker.stop()

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}

    def undo() -> None:
        for s, h in old.items():
            signal.signal(s, h)

    return undo


__all__ = ["Worker", "WorkerConfig", "load_app", "run_task"]
