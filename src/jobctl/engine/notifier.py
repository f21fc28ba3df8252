"""Failure notification: runs a dead job's notifier and mails ``MAILTO`` (domain/notify.py).

When: every time a job *ends* ``dead`` on this daemon: after its last allowed failure
(``max_attempts``), a non-retryable exit code, a timeout on its last attempt, a lease
that ran out on its last attempt or a poison verdict (both found by the timer's
reclaim, or by start-up recovery: the daemon hands those over once recovery is done).
Not on a failure that will be retried, not for a job cancelled, and not for a job whose
owner may no longer run jobs (``denied``: nothing may run as that owner).

How: each step (the ``on_failure`` command, then the mail) is started through the
executor's own path (the spawn helper, the owner's uid and groups, the attempt's
cgroup, the ``log_bytes`` cap), with the failed job's environment plus the
``JOBCTL_FAILED_*`` variables, its output in ``ID.ATTEMPT.notify.log`` beside the
attempt's log. It is not a job: it has no lease, takes no executor slot, uses none of
the job's budget, and its own failure notifies nobody (it is only recorded). What it did
lands in the job's ``notified`` column, shown by ``jobctl show``.

At most once: a daemon that stops (or crashes) while a notifier runs stops it; it is
not run again after a restart (docs/operations.md says so).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import signal
import socket
from collections.abc import Awaitable, Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from jobctl.domain import jobenv
from jobctl.domain.clock import Clock, iso
from jobctl.domain.models import AttemptResult, Claim, Job, JobSpec, trusted_spec
from jobctl.domain.notify import (
    MAIL_SCRIPT,
    NOTIFY_TIMEOUT,
    SENDMAIL_DIRS,
    TAIL_BYTES,
    Failure,
    NotifyDefaults,
)
from jobctl.domain.queue_defaults import with_queue_limits
from jobctl.domain.states import DeadReason, JobStatus
from jobctl.engine import process, proctree
from jobctl.logfmt import logval
from jobctl.store.aio import AsyncStore

log = logging.getLogger("jobctl.notifier")

Spawn = Callable[[Claim, Path], Awaitable[process.Running]]


class Notifier:
    """Runs notifiers of jobs that ended dead; one task per job, tracked for shutdown."""

    def __init__(
        self,
        store: AsyncStore,
        clock: Clock,
        defaults: NotifyDefaults,
        spawn: Spawn,
        log_path: Callable[[int, int], Path],
        kill_grace: float = 10.0,
        timeout: float = NOTIFY_TIMEOUT,
    ) -> None:
        self._store = store
        self._clock = clock
        self.defaults = defaults
        self._spawn = spawn
        self._log_path = log_path
        self._grace = kill_grace
        self._timeout = timeout
        self._tasks: set[asyncio.Task[None]] = set()
        self._live: dict[int, process.Running] = {}  # by pid (a Running is not hashable)

    def finished(self, job: Job | None, claim: Claim, result: AttemptResult) -> None:
        """The executor's ``on_finish``: a job that ended dead is notified of."""
        if job is not None and job.status is JobStatus.DEAD:
            self.dead(job, result.exit_code, result.error, result.output_tail)

    def reclaimed(self, job: Job) -> None:
        """A reclaim (the timer's, start-up recovery's) moved ``job`` on: notified if dead
        (lease expired, poison)."""
        if job.status is JobStatus.DEAD:
            self.dead(job, None, job.last_error, None)

    def dead(self, job: Job, code: int | None, error: str | None, tail: str | None) -> None:
        if job.dead_reason == DeadReason.DENIED:
            return  # nothing may run as an owner who may no longer run jobs
        task = asyncio.get_running_loop().create_task(self._dead(job, code, error, tail))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    async def _dead(self, job: Job, code: int | None, error: str | None, tail: str | None) -> None:
        """Find the notifier (the queue's as it is set now) and run it, if there is one."""
        queue = await self._store.run(self._store.store.queue_policy, job.spec.queue)
        job = with_queue_limits(job, queue.resources)  # runs under the attempt's limits
        command = self.defaults.command_of(job, queue.on_failure)
        to = self.defaults.mailto_of(job)
        if command is None and to is None:
            return
        path = self._log_path(job.id, job.attempt)
        if tail is None:
            tail = process.read_tail(path, TAIL_BYTES)
        await self._notify(Failure(job, code, error, tail, str(path)), command, to)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("event=notify_task_failed error=%s", logval(task.exception()))

    async def _notify(self, failure: Failure, command: str | None, to: str | None) -> None:
        job = failure.job
        steps: list[dict[str, Any]] = []
        if command is not None:
            steps.append(await self._step(failure, "command", command, {}) | {"command": command})
        if to is not None:
            steps.append(await self._mail(failure, to))
        record = {"at": iso(self._clock.now()), "steps": steps}
        try:
            await self._store.run(self._store.store.record_notification, job.id, json.dumps(record))
        except Exception as exc:  # purged meanwhile, or the store failing: the log says it
            log.warning("event=notify_record_failed job=%s error=%s", job.id, logval(exc))

    async def _mail(self, failure: Failure, to: str) -> dict[str, Any]:
        sendmail = find_sendmail(failure.job)
        if sendmail is None:
            log.warning("event=notify_no_sendmail job=%s mailto=%s", failure.job.id, logval(to))
            return {"via": "mail", "to": to, "exit_code": None, "error": "no sendmail found"}
        text = failure.mail(to, f"jobctl@{socket.gethostname()}")
        extra = {"JOBCTL_MAIL": text, "JOBCTL_SENDMAIL": sendmail}
        return await self._step(failure, "mail", MAIL_SCRIPT, extra) | {"to": to}

    async def _step(
        self, failure: Failure, via: str, line: str, extra: dict[str, str]
    ) -> dict[str, Any]:
        """Run one notifier command line to its end; what it did, for the record."""
        job = failure.job
        claim = _claim(failure, line, extra)
        path = self._log_path(job.id, job.attempt).with_suffix(f".{via}.notify.log")
        try:
            run = await self._spawn(claim, path)
        except Exception as exc:  # refused or not startable: recorded, never retried
            log.warning("event=notify_failed job=%s via=%s error=%s", job.id, via, logval(exc))
            return {"via": via, "exit_code": None, "error": f"cannot start: {exc}"}
        self._live[run.proc.pid] = run
        try:
            code, error = await self._wait(run)
        finally:
            self._live.pop(run.proc.pid, None)
            process.signal_group(run.proc.pid, signal.SIGKILL)  # stragglers of its group
            await proctree.end(run)
        log.info("event=notified job=%s via=%s exit=%s", job.id, via, code)
        return {"via": via, "exit_code": code, "error": error, "log": str(path)}

    async def _wait(self, run: process.Running) -> tuple[int, str | None]:
        try:
            code = await asyncio.wait_for(asyncio.shield(run.exited), self._timeout)
        except TimeoutError:
            await proctree.stop(run, self._grace)
            return run.exited.result(), f"timed out after {self._timeout:g}s"
        if run.stopping is not None:  # stopped at shutdown
            await run.stopping
            return code, "stopped: the daemon is stopping"
        return code, None if code == 0 else f"exit code {code}"

    async def shutdown(self, grace: float) -> None:
        """Let notifiers end within ``grace``, then stop them (they are not run again)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace)
        for run in list(self._live.values()):
            if run.stopping is None:
                run.stopping = asyncio.get_running_loop().create_task(
                    proctree.stop(run, self._grace)
                )
        if self._tasks:
            await asyncio.wait(set(self._tasks))


def find_sendmail(job: Job) -> str | None:
    """A ``sendmail`` on the job's ``PATH``, else in the usual system directories."""
    path = dict(job.spec.env).get("PATH") or jobenv.default_path(job.spec.owner_uid)
    return shutil.which("sendmail", path=":".join([path, *SENDMAIL_DIRS]))


_SPEC = tuple(f.name for f in fields(JobSpec))


def _claim(failure: Failure, line: str, extra: dict[str, str]) -> Claim:
    """The failed job's claim with the notifier as its command (same owner, cwd, env)."""
    job = failure.job
    env = dict(job.spec.env) | failure.env() | extra
    given = {name: getattr(job.spec, name) for name in _SPEC}
    # Not validated again: the job was, and the JOBCTL_* names are the daemon's own.
    spec = trusted_spec(
        **given
        | {
            "command": ("/bin/sh", "-c", line),
            "env": tuple(sorted(env.items())),
            "timeout": None,
        }
    )
    lease = job.lease_until or job.run_at
    return Claim(replace(job, spec=spec), job.attempt, job.generation, lease)
