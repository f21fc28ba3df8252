"""What an attempt's end means: its :class:`AttemptResult`, the job after the finish, its log line.

Pure helpers of the executor (engine/executor.py), apart so that the executor keeps to the
running of attempts: how an exit code, a stop reason and the output's tail become the
result the store is handed, and the one log line that says what the finish did to the job.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from jobctl.domain.clock import iso
from jobctl.domain.models import AttemptResult, Claim, Finished, Job
from jobctl.domain.states import JobStatus, Outcome, StopReason
from jobctl.engine import process
from jobctl.logfmt import logval

log = logging.getLogger("jobctl.executor")  # the executor's lines, wherever they are written


def not_started(exc: OSError) -> AttemptResult:
    """A command that could not be started: for want of a resource, retried for free
    later; else as a shell says it (127 not found, 126 cannot execute), not retried."""
    if process.is_transient(exc):
        error = f"cannot start for now (retried later, no attempt used): {exc}"
        return AttemptResult(Outcome.FAILED, None, error, transient=True)
    code = 127 if isinstance(exc, FileNotFoundError) else 126
    return AttemptResult(Outcome.FAILED, code, f"cannot start: {exc}")


def result_of(run: process.Running, code: int, tail: str) -> AttemptResult:
    """The result of a command that ended with ``code``: its stop reason first (a timeout,
    a cancel, a lost lease, a shutdown), then what the code and the tail say."""
    reason = run.stop_reason
    if reason is StopReason.TIMEOUT:
        error = f"timed out after {run.claim.job.spec.timeout:g}s"
        return AttemptResult(reason.outcome, code, error, tail)
    if reason is not None:  # shutdown: its text; cancel, lost lease: the stop's detail
        error = reason.text if reason is StopReason.SHUTDOWN else run.stop_detail
        return AttemptResult(reason.outcome, code, error, tail)
    if code == 0:
        return AttemptResult(Outcome.SUCCEEDED, 0, None, tail)
    if process.gate_shut(code, tail):  # its starter died before letting it go: never ran
        error = "cannot start for now (retried later, no attempt used): the gate was never opened"
        return AttemptResult(Outcome.FAILED, None, error, tail, transient=True)
    cwd = process.cwd_failure(code, tail, run.claim)
    if cwd is not None:
        return AttemptResult(Outcome.FAILED, cwd[0], cwd[1], tail)
    if code < 0:
        return AttemptResult(Outcome.FAILED, code, f"killed by signal {-code}", tail)
    return AttemptResult(Outcome.FAILED, code, f"exit code {code}", tail)


def after(claim: Claim, result: AttemptResult, done: Finished) -> Job:
    """The job as the committed finish left it, from the claim and the lean answer."""
    return replace(
        claim.job,
        status=done.status,
        run_at=done.run_at,
        attempt=claim.attempt,
        failures=done.failures,
        generation=claim.generation,
        lease_owner=None,
        lease_until=None,
        last_error=None if result.outcome is Outcome.SUCCEEDED else result.error,
        dead_reason=done.dead_reason,
    )


def log_finished(job: Job, claim: Claim, result: AttemptResult) -> None:
    """The one line of an attempt's end, named after what it did to the job."""
    extra = ""
    if result.error:
        extra += f" error={logval(result.error)}"
    if job.status is JobStatus.DEAD:
        extra += f" reason={logval(job.dead_reason)}"
    elif job.status is JobStatus.SCHEDULED:
        extra += f" run_at={iso(job.run_at)}"
    log.info(
        "event=%s job=%s attempt=%s outcome=%s exit=%s status=%s%s",
        _event(job.status, result.outcome),
        job.id,
        claim.attempt,
        result.outcome.value,
        result.exit_code,
        job.status.value,
        extra,
    )


def _event(status: JobStatus, outcome: Outcome) -> str:
    """``retry_scheduled`` only after a failure; a shutdown's free re-run is ``rescheduled``."""
    if status is JobStatus.SCHEDULED:
        return "retry_scheduled" if outcome.uses_budget else "rescheduled"
    return status.value
