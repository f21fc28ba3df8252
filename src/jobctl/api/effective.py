"""What a job runs under that it may not say itself: its effective resource limits and
failure notifier, each with where it comes from (the job, its queue, the daemon's
config), for ``GET /v1/jobs/{id}`` and ``jobctl show`` (domain/queue_defaults.py)."""

from __future__ import annotations

from typing import Any

from jobctl.domain import queue_defaults
from jobctl.domain.dispatch import QueuePolicy
from jobctl.domain.models import Job
from jobctl.domain.notify import NotifyDefaults


def effective_out(job: Job, queue: QueuePolicy, notify: NotifyDefaults) -> dict[str, Any]:
    """``resources`` and ``resources_from`` (limit -> ``job`` or ``queue NAME``), as the
    next attempt gets them; ``on_failure`` and ``on_failure_from`` as a death now would
    find them (null: none)."""
    own = job.spec.resources
    queued = None if job.spec.http is not None else queue.resources  # no command, no limits
    limits = queue_defaults.merged(own, queued)
    command, source = notify.resolve(job, queue.on_failure)
    return {
        "resources": limits.to_json() if limits else {},
        "resources_from": queue_defaults.sources(own, job.spec.queue, queued),
        "on_failure": command,
        "on_failure_from": source,
    }


__all__ = ["effective_out"]
