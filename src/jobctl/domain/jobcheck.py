"""The checks a job's fields pass before the store keeps them: command, queue, limits,
environment, payload, failure notifier.

One function per rule, shared by :class:`jobctl.domain.models.JobSpec` (at construction)
and :class:`jobctl.domain.models.JobTemplate` (when a schedule is created); the API's wire
models apply the same limits (:mod:`jobctl.domain.limits`).
"""

from __future__ import annotations

from typing import Protocol

from jobctl.domain import http as web
from jobctl.domain import limits
from jobctl.domain.limits import MAX_PAYLOAD_BYTES, clean_text
from jobctl.errors import InvalidInput


def check_payload(command: tuple[str, ...], env: tuple[tuple[str, str], ...]) -> None:
    """Refuse a command plus environment over :data:`MAX_PAYLOAD_BYTES` (UTF-8)."""
    chars = sum(map(len, command)) + sum(len(k) + len(v) for k, v in env)
    if chars * 4 <= MAX_PAYLOAD_BYTES:  # a character is at most 4 bytes: no need to encode
        return
    size = sum(len(a.encode()) for a in command) + sum(
        len(k.encode()) + len(v.encode()) for k, v in env
    )
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidInput(
            f"command plus env is {size} bytes, over the {MAX_PAYLOAD_BYTES}-byte limit",
            limit=MAX_PAYLOAD_BYTES,
        )


class _JobFields(Protocol):
    """What a job and a template share (:func:`check_job_fields` checks them)."""

    @property
    def command(self) -> tuple[str, ...]: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def env(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def cwd(self) -> str: ...
    @property
    def on_failure(self) -> str | None: ...
    @property
    def http(self) -> web.HttpRequest | None: ...
    @property
    def payload(self) -> str | None: ...


def check_job_fields(job: _JobFields) -> None:
    """Refuse what the store could not keep or the executor could not start, with the
    limits of :mod:`jobctl.domain.limits` (the API's wire models apply the same ones)."""
    if job.payload is not None:
        _check_payload_job(job)
    elif job.http is None:
        _check_command(job.command)
    elif job.command:
        raise InvalidInput("a job runs either a command or an http request, not both")
    if not 1 <= job.max_attempts <= limits.MAX_ATTEMPTS:
        raise InvalidInput(f"max_attempts must be 1-{limits.MAX_ATTEMPTS}")
    if not limits.MIN_PRIORITY <= job.priority <= limits.MAX_PRIORITY:
        raise InvalidInput(f"priority must be {limits.MIN_PRIORITY} to {limits.MAX_PRIORITY}")
    t = job.timeout
    if t is not None and not limits.MIN_TIMEOUT <= t <= limits.MAX_TIMEOUT:
        raise InvalidInput(
            f"timeout must be {limits.MIN_TIMEOUT:g} to {limits.MAX_TIMEOUT:.0f} seconds",
            limit=limits.MIN_TIMEOUT,
        )
    if not (0 < len(job.queue) <= limits.MAX_QUEUE_NAME and clean_text(job.queue)):
        raise InvalidInput(f"queue must be 1-{limits.MAX_QUEUE_NAME} characters, without NUL")
    if not (job.cwd.startswith("/") and len(job.cwd) <= limits.MAX_CWD and clean_text(job.cwd)):
        raise InvalidInput(f"cwd must be an absolute path of 1-{limits.MAX_CWD} characters")
    for name, value in job.env:
        check_env_name(name)
        if not clean_text(value):
            raise InvalidInput(f"environment variable {name!r}: the value holds a NUL byte")
    check_payload(job.command, job.env)
    check_on_failure(job.on_failure)


def _check_payload_job(job: _JobFields) -> None:
    """A payload job (docs/workers.md) is run by a worker: no command, request,
    environment or failure notifier of the daemon's."""
    from jobctl.domain.workers import check_payload_text

    if job.command or job.http is not None:
        raise InvalidInput("a job runs a command, an http request or a payload, only one")
    if job.env or job.on_failure is not None:
        raise InvalidInput("a payload job takes no environment or on_failure")
    check_payload_text(job.payload or "")


def check_on_failure(on_failure: str | None) -> None:
    """A failure notifier: a shell command line of 1 to ``MAX_ON_FAILURE`` characters."""
    if on_failure is None:
        return
    if not (0 < len(on_failure) <= limits.MAX_ON_FAILURE and clean_text(on_failure)):
        raise InvalidInput(
            f"on_failure must be a command line of 1-{limits.MAX_ON_FAILURE} characters, "
            "without NUL"
        )


def _check_command(command: tuple[str, ...]) -> None:
    if not command or not all(isinstance(a, str) for a in command):
        raise InvalidInput("command must be a non-empty list of strings")
    if not command[0]:
        raise InvalidInput("command[0] (the program) must not be empty")
    if not all(map(clean_text, command)):
        raise InvalidInput("command: an argument holds a NUL byte")


def check_env_name(name: str) -> None:
    """An environment variable name a job may set (the ``JOBCTL_`` names are the daemon's)."""
    if (
        not name
        or "=" in name
        or not clean_text(name)
        or name.startswith(limits.RESERVED_ENV_PREFIX)
    ):
        raise InvalidInput(f"invalid environment variable name {name!r}")
