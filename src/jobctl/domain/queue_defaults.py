"""A job's effective resource limits and failure notifier: its own, else its queue's,
else the daemon's (issue 12, "per-queue defaults"). Pure.

Resource limits are resolved limit by limit when an attempt is claimed (the store hands
the executor a claim whose spec holds the effective limits, store/claims.py): a job that
says ``--nice 5`` in a queue with ``--memory-max 1G`` runs at nice 5 under 1 GiB. The
stored job keeps only its own values, so changing a queue's defaults changes every later
attempt of its jobs, as a systemd slice's settings do for its units. The daemon has no
configured default for the limits (a limit the host cannot apply would then fail every
job).

The notifier is resolved when a job ends dead: its own ``on_failure``, its queue's (set
with ``jobctl queues set --on-failure``), the config's ``[notify.queues]`` entry for its
queue, the config's ``notify.on_failure``.
"""

from __future__ import annotations

from dataclasses import fields, replace

from jobctl.domain.models import Job, JobSpec, trusted_spec
from jobctl.domain.resources import Resources

#: The limits, in the order ``show`` lists them.
LIMITS = ("nice", "memory_max", "cpu_quota")
_SPEC = tuple(f.name for f in fields(JobSpec))


def merged(own: Resources | None, queued: Resources | None) -> Resources | None:
    """Each limit the job gives, else its queue's; None when neither gives any."""
    if not queued:
        return own or None
    if not own:
        return queued
    return Resources(
        queued.nice if own.nice is None else own.nice,
        queued.memory_max if own.memory_max is None else own.memory_max,
        queued.cpu_quota if own.cpu_quota is None else own.cpu_quota,
    )


def sources(own: Resources | None, queue: str, queued: Resources | None) -> dict[str, str]:
    """Where each effective limit comes from: ``job`` or ``queue NAME``."""
    out = {}
    for name in LIMITS:
        if own is not None and getattr(own, name) is not None:
            out[name] = "job"
        elif queued is not None and getattr(queued, name) is not None:
            out[name] = f"queue {queue}"
    return out


def with_queue_limits(job: Job, queued: Resources | None) -> Job:
    """``job`` with its queue's limits filled in where it gives none (an http job runs no
    command: it has no limits to fill)."""
    if not queued or job.spec.http is not None:
        return job
    effective = merged(job.spec.resources, queued)
    if effective == job.spec.resources:
        return job
    given = {name: getattr(job.spec, name) for name in _SPEC}
    # Not validated again: the job's fields were, and the queue's limits were at `queues set`.
    spec = trusted_spec(**given | {"resources": effective})
    return replace(job, spec=spec)


def notifier(
    own: str | None,
    queue: str,
    queue_set: str | None,
    configured: dict[str, str] | None,
    default: str | None,
) -> tuple[str | None, str | None]:
    """The notifier command line and where it comes from (None, None: there is none).

    ``queue_set``: the queue's own (``queues set --on-failure``); ``configured``: the
    config's ``[notify.queues]``; ``default``: the config's ``notify.on_failure``."""
    if own:
        return own, "job"
    if queue_set:
        return queue_set, f"queue {queue}"
    from_config = (configured or {}).get(queue)
    if from_config:
        return from_config, f"config notify.queues.{queue}"
    if default:
        return default, "config notify.on_failure"
    return None, None


__all__ = ["LIMITS", "merged", "notifier", "sources", "with_queue_limits"]
