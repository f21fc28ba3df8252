"""What an attempt's end means: its :class:`AttemptResult`, the job after the finish, its log line.

Pure helpers of the executor (engine/executor.py), apart so that the executor keeps to the
running of attempts: how an exit code, a stop reason and the output's tail become the
result the store is handed, and the one log line that says what the finish did to the job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace

from jobctl.domain.clock import iso
from jobctl.domain.models import AttemptResult, Claim, Finished, Job
from jobctl.domain.slotted import compile_builder
from jobctl.domain.states import JobStatus, Outcome, StopReason
from jobctl.engine import process
from jobctl.engine.limits import StartRefused
from jobctl.logfmt import info, logval

log = logging.getLogger("jobctl.executor")  # the executor's lines, wherever they are written


def not_started(exc: OSError) -> AttemptResult:
    """A command that could not be started: for want of a resource, retried for free
    later; else as a shell says it (127 not found, 126 cannot execute), not retried."""
    if process.is_transient(exc):
        error = f"cannot start for now (retried later, no attempt used): {exc}"
        return AttemptResult(Outcome.FAILED, None, error, transient=True)
    code = 127 if isinstance(exc, FileNotFoundError) else 126
    return AttemptResult(Outcome.FAILED, code, f"cannot start: {exc}")


#: The result of every command that ended with 0 and wrote nothing (``true``, most cron
#: jobs): frozen, so one serves them all (issue 17: a result's 11 fields cost ~2.6 µs of
#: the loop to build per attempt).
SILENT_SUCCESS = AttemptResult(Outcome.SUCCEEDED, 0, None, "", log_bytes=0)


def start_failed(exc: Exception) -> AttemptResult:
    """A command whose start raised ``exc``: :func:`not_started` for an OSError; a
    resource limit this daemon cannot apply (``StartRefused``) or a request the start
    refused (a NUL in an argument: ValueError) is 126, "cannot start", not retried."""
    if isinstance(exc, OSError):
        return not_started(exc)
    if isinstance(exc, StartRefused):
        return AttemptResult(Outcome.FAILED, 126, f"cannot start: {exc}")
    return AttemptResult(Outcome.FAILED, 126, f"cannot start: {type(exc).__name__}: {exc}")


async def ended(run: process.Running, code: int) -> AttemptResult:
    """The result of a command that ended with ``code``, its log read at its end: with
    the output cap's note first when the ``log_bytes`` quota cut its output (the file
    marked after its size is read, so the mark is not counted as output), and said in
    a failure's error too."""
    tail, size = process.log_end(run)
    full = process.output_cut(run, size)  # reached the cap: later writes failed
    if run.log_cap is None or not (full or run.cut_bytes):
        return result_of(run, code, tail, size)
    if full:
        await asyncio.to_thread(process.mark_cut, run)  # after the size: output only
    tail = process.cut_note(run.log_cap, run.cut_bytes) + tail  # first: NULs follow
    result = result_of(run, code, tail, size)
    if result.error:  # a failure says it too, in the attempt's error
        cut = f"; output cut at {run.log_cap} bytes (log_bytes quota)"
        result = replace(result, error=result.error + cut)
    return result


def given_back(why: str) -> AttemptResult:
    """A job claimed ahead of free slots given back unstarted (engine/ahead.py): at
    shutdown, or its queue paused. "Cannot start for now": it uses no attempt."""
    error = f"cannot start for now (retried later, no attempt used): {why}"
    return AttemptResult(Outcome.FAILED, None, error, transient=True)


def result_of(run: process.Running, code: int, tail: str, size: int = 0) -> AttemptResult:
    """The result of a command that ended with ``code``: its stop reason first (a timeout,
    a cancel, a lost lease, a shutdown), then what the code and the tail say; ``size``:
    its log's (``log_bytes``, given here: a ``replace`` after cost ~10 µs per attempt)."""
    reason = run.stop_reason
    if reason is StopReason.TIMEOUT:
        error = f"timed out after {run.claim.job.spec.timeout:g}s"
        return AttemptResult(reason.outcome, code, error, tail, log_bytes=size)
    if reason is not None:  # shutdown: its text; cancel, lost lease: the stop's detail
        error = reason.text if reason is StopReason.SHUTDOWN else run.stop_detail
        return AttemptResult(reason.outcome, code, error, tail, log_bytes=size)
    if code == 0:
        if not tail and not size:  # a silent success: one shared, immutable result
            return SILENT_SUCCESS
        return AttemptResult(Outcome.SUCCEEDED, 0, None, tail, log_bytes=size)
    if process.gate_shut(code, tail):  # its starter died before letting it go: never ran
        error = "cannot start for now (retried later, no attempt used): the gate was never opened"
        return AttemptResult(Outcome.FAILED, None, error, tail, transient=True, log_bytes=size)
    cwd = process.cwd_failure(code, tail, run.claim)
    if cwd is not None:
        return AttemptResult(Outcome.FAILED, cwd[0], cwd[1], tail, log_bytes=size)
    error = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    return AttemptResult(Outcome.FAILED, code, error, tail, log_bytes=size)


#: The fields a finish changes (:func:`after`); every other one is the claimed job's.
_AFTER = ("status", "run_at", "attempt", "failures", "generation", "last_error", "dead_reason")


def _compile_after() -> Callable[..., Job]:
    """A straight-line ``dataclasses.replace`` of a claimed :class:`Job` for :func:`after`,
    generated from the field names (``replace`` walks the fields' metadata: ~10 µs per
    finished attempt quiet, 20 under load); stored slot by slot through a plain twin class
    (:func:`jobctl.domain.slotted.compile_builder`, ~0.6 µs), not by ``object.__setattr__``
    per field (~2 µs). A new field of Job is copied from the claimed job unless listed in
    :data:`_AFTER`."""
    given = {"lease_owner": "None", "lease_until": "None"} | {f: f for f in _AFTER}
    values = {f: given.get(f, "old." + f) for f in Job.__dataclass_fields__}
    return compile_builder(Job, "finished_job", f"old, {', '.join(_AFTER)}", values)


_finished_job = _compile_after()


def after(claim: Claim, result: AttemptResult, done: Finished) -> Job:
    """The job as the committed finish left it, from the claim and the lean answer."""
    return _finished_job(
        claim.job,
        status=done.status,
        run_at=done.run_at,
        attempt=claim.attempt,
        failures=done.failures,
        generation=claim.generation,
        last_error=None if result.outcome is Outcome.SUCCEEDED else result.error,
        dead_reason=done.dead_reason,
    )


_STARTED = "event=started job=%s attempt=%s gen=%s pid=%s queue=%s key=%s"
_FINISHED = "event=%s job=%s attempt=%s outcome=%s exit=%s status=%s%s"


def log_started(claim: Claim, pid: int) -> None:
    """The line of an attempt's start: its command runs with ``pid``."""
    if not log.isEnabledFor(logging.INFO):  # at --log-level warning: nothing to build
        return
    job = claim.job
    args = (job.id, claim.attempt, claim.generation, pid, logval(job.spec.queue), logval(job.key))
    info(log, _STARTED, args)


def log_finished(job: Job, claim: Claim, result: AttemptResult) -> None:
    """The one line of an attempt's end, named after what it did to the job."""
    if not log.isEnabledFor(logging.INFO):  # at --log-level warning: nothing to build
        return
    extra = ""
    if result.error:
        extra += f" error={logval(result.error)}"
    if job.status is JobStatus.DEAD:
        extra += f" reason={logval(job.dead_reason)}"
    elif job.status is JobStatus.SCHEDULED:
        extra += f" run_at={iso(job.run_at)}"
    event = _event(job.status, result.outcome)
    args = (event, job.id, claim.attempt, result.outcome.value, result.exit_code,
            job.status.value, extra)  # fmt: skip
    info(log, _FINISHED, args)


def _event(status: JobStatus, outcome: Outcome) -> str:
    """``retry_scheduled`` only after a failure; a shutdown's free re-run is ``rescheduled``."""
    if status is JobStatus.SCHEDULED:
        return "retry_scheduled" if outcome.uses_budget else "rescheduled"
    return status.value
