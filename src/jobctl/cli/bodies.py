"""The API job object of ``jobctl add`` (and of schedules and crontab import).

Kept free of Typer, pydantic and rich: the lean path of :mod:`jobctl.cli.fast` builds a
job with exactly the code the Typer command uses.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jobctl.domain.durations import parse_duration
from jobctl.errors import InvalidInput


def job_body(
    command: list[str],
    *,
    at: str | None = None,
    in_: str | None = None,
    key: str | None = None,
    queue: str = "default",
    priority: int = 0,
    max_attempts: int | None = None,
    timeout: str | None = None,
    backoff: str | None = None,
    cwd: str | Path | None = None,
    env: list[str] | None = None,
    shell: bool = False,
    retry_on: str | None = None,
    no_retry_on: str | None = None,
    tz: str | None = None,
    nice: int | None = None,
    memory_max: str | None = None,
    cpu_quota: str | None = None,
    env_from_shell: bool = False,
    on_failure: str | None = None,
    http: dict[str, Any] | None = None,
    payload: str | None = None,
) -> dict[str, Any]:
    """Turn ``jobctl add`` options into the API's job object (also used by schedules).

    A naive ``at`` is wall time in ``tz``, else in the user's zone (``$TZ``, the host's).
    ``env_from_shell``: the job gets this process's environment (as ``at`` does), then the
    ``env`` entries; otherwise only the ``env`` entries (the daemon's clean default).
    ``http``: a webhook job's request (:func:`jobctl.cli.webhook_cmd.http_request`)
    instead of a command; ``--retry-on`` then lists 4xx statuses. ``payload``: a worker's
    job (docs/workers.md), this JSON text instead of a command.
    """
    if at and in_:
        raise InvalidInput("give either --at or --in, not both")
    if key is not None and not key.strip():  # was sent as no key: a second add made a twin
        raise InvalidInput("--key must not be empty (leave it out for a job without a key)")
    if payload is not None:
        if command or http is not None:
            raise InvalidInput("give either a command, --http or --payload: one")
        return _payload_job(payload, at=at, in_=in_, tz=tz, key=key, queue=queue,
                            priority=priority, max_attempts=max_attempts, timeout=timeout,
                            backoff=backoff)  # fmt: skip
    if http is not None:
        return _http_job(command, http, at=at, in_=in_, tz=tz, key=key, queue=queue,
                         priority=priority, max_attempts=max_attempts, timeout=timeout,
                         backoff=backoff, retry_on=retry_on)  # fmt: skip
    return _command_job(command, at=at, in_=in_, tz=tz, key=key, queue=queue, priority=priority,
                        max_attempts=max_attempts, timeout=timeout, backoff=backoff, cwd=cwd,
                        env=env, shell=shell, env_from_shell=env_from_shell, retry_on=retry_on,
                        no_retry_on=no_retry_on, nice=nice, memory_max=memory_max,
                        cpu_quota=cpu_quota, on_failure=on_failure)  # fmt: skip


def _command_job(command: list[str], **o: Any) -> dict[str, Any]:
    """A command job (``o``: :func:`job_body`'s options): the command, through a shell
    with ``shell``, its directory and environment, then each option that was given."""
    if not command:
        raise InvalidInput("missing command: jobctl add [OPTIONS] -- COMMAND [ARG...]")
    if o["shell"]:
        if len(command) != 1:
            raise InvalidInput("--shell takes the whole command as one quoted string")
        command = shell_argv(command[0])
    body: dict[str, Any] = {
        "command": command,
        "queue": o["queue"],
        "priority": o["priority"],
        "cwd": os.path.abspath(o["cwd"] or os.getcwd()),
        "env": _job_env(o["env"] or [], o["env_from_shell"]),
    }
    retry_on, no_retry_on = o["retry_on"], o["no_retry_on"]
    optional = {
        "run_at": run_at_of(o["at"], o["in_"], o["tz"]),
        "key": o["key"] or None,
        "max_attempts": o["max_attempts"],
        "timeout": parse_duration(o["timeout"]) if o["timeout"] else None,
        "retry_on": parse_codes(retry_on, "--retry-on") if retry_on else None,
        "no_retry_on": parse_codes(no_retry_on, "--no-retry-on") if no_retry_on else None,
        "backoff": _backoff(o["backoff"]) if o["backoff"] else None,
        "nice": o["nice"],
        "memory_max": _memory(o["memory_max"]) if o["memory_max"] else None,
        "cpu_quota": _percent(o["cpu_quota"]) if o["cpu_quota"] else None,
        "on_failure": o["on_failure"] or None,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


def _http_job(command: list[str], http: dict[str, Any], **o: Any) -> dict[str, Any]:
    if command:
        raise InvalidInput("--http sends a request instead of a command: drop the command")
    if o["retry_on"]:
        http["retry_on"] = parse_codes(o["retry_on"], "--retry-on", 400, 499)
    body = {"http": http, "queue": o["queue"], "priority": o["priority"]}
    return body | _when_and_retries(o)


def _when_and_retries(o: dict[str, Any]) -> dict[str, Any]:
    """The options an HTTP job and a payload job share with a command (given ones only)."""
    optional = {
        "run_at": run_at_of(o["at"], o["in_"], o["tz"]),
        "key": o["key"] or None,
        "max_attempts": o["max_attempts"],
        "timeout": parse_duration(o["timeout"]) if o["timeout"] else None,
        "backoff": _backoff(o["backoff"]) if o["backoff"] else None,
    }
    return {k: v for k, v in optional.items() if v is not None}


def payload_value(text: str) -> Any:
    """``--payload``'s JSON, checked as the API checks it (at most 64 KiB as compact
    JSON, numbers within +-(2^53-1), not null), so a bad one is refused before any request."""
    import json

    from jobctl.domain.workers import payload_text

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"--payload: not JSON: {exc}") from None
    if value is None:
        raise InvalidInput("--payload: null is no payload (give any other JSON value)")
    try:
        payload_text(value)
    except InvalidInput as exc:
        raise InvalidInput(f"--{exc}") from None
    return value


def _payload_job(text: str, **o: Any) -> dict[str, Any]:
    body = {"payload": payload_value(text), "queue": o["queue"], "priority": o["priority"]}
    return body | _when_and_retries(o)


def _memory(text: str) -> int:
    """``--memory-max``: bytes, or a size with a unit (512M, 1G, 256MiB)."""
    from jobctl.domain.quota import parse_size

    try:
        return parse_size(text)
    except ValueError:
        raise InvalidInput(f"--memory-max {text!r}: give a size such as 512M or 1GiB") from None


def _percent(text: str) -> float:
    """``--cpu-quota``: percent of one CPU, ``50%`` or ``50`` (``200%``: two CPUs)."""
    try:
        return float(text.removesuffix("%"))
    except ValueError:
        raise InvalidInput(f"--cpu-quota {text!r}: give a percentage such as 50%") from None


#: Where ``--shell`` looks for bash (the daemon runs the command on this host).
BASH_PATHS = ("/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash")


def shell_argv(script: str) -> list[str]:
    """``--shell``: ``bash -o pipefail -c SCRIPT``, so ``pg_dump app | gzip > f`` fails
    when pg_dump fails (``/bin/sh`` is often dash, which has no pipefail and reports the
    last stage's status); ``/bin/sh -c`` only on a host without bash."""
    bash = next((p for p in BASH_PATHS if os.access(p, os.X_OK)), None)
    return [bash, "-o", "pipefail", "-c", script] if bash else ["/bin/sh", "-c", script]


#: How long ago an ``--at`` time may be and still run (at once): a script's computed "now"
#: or a time typed a minute late. Further back it is refused, as at(1) refuses it: the
#: user most likely meant another day, and the job would otherwise run at once unnoticed.
PAST_GRACE = 300.0


def run_at_of(at: str | None, in_: str | None, tz: str | None = None) -> str | None:
    """The wire time of ``--at`` (read in --tz, else the user's zone) or ``--in``; None: now."""
    if at:
        from jobctl.cli.humantime import parse_at, relative  # pendulum: never on the fast path
        from jobctl.cli.schedules import user_zone  # (and Typer)

        when, now = parse_at(at, user_zone(tz))[0], datetime.now(UTC)  # the CLI's boundary
        if (now - when).total_seconds() > PAST_GRACE:
            raise InvalidInput(
                f"--at {at}: that time is past ({when:%Y-%m-%d %H:%M:%S} UTC, "
                f"{relative(when, now)}); give a future time, or leave --at out to run now"
            )
        return when.isoformat()
    if in_:
        delay = parse_duration(in_)
        try:
            return (datetime.now(UTC) + timedelta(seconds=delay)).isoformat()
        except OverflowError:
            raise InvalidInput(f"--in {in_}: too far ahead (the calendar ends in 9999)") from None
    return None


def _backoff(text: str) -> dict[str, float]:
    """``BASE[:CAP]``; without a cap, 64 times the base but at least an hour."""
    base, _, cap = text.partition(":")
    b = parse_duration(base)
    return {"base": b, "cap": parse_duration(cap) if cap else max(b * 64, 3600)}


def parse_codes(text: str, option: str, low: int = 0, high: int = 255) -> list[int]:
    """Exit codes as ``1,2,75`` or ranges ``64-78`` (an http job's: 4xx statuses)."""
    codes: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi or lo)
        except ValueError:
            raise InvalidInput(f"{option} takes exit codes like 1,2,64-78, got {text!r}") from None
        if not low <= first <= last <= high:
            what = "exit codes" if high == 255 else "an http job's statuses"
            raise InvalidInput(f"{option}: {what} are {low}-{high}, got {part.strip()!r}")
        codes.update(range(first, last + 1))
    return sorted(codes)


def _job_env(pairs: list[str], from_shell: bool) -> dict[str, str]:
    if not from_shell:
        return _env(pairs)
    from jobctl.domain.jobenv import from_shell as shell_env

    return shell_env(os.environ) | _env(pairs)


def _env(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise InvalidInput(f"--env takes NAME=VALUE, got {pair!r}")
        out[name] = value
    return out
