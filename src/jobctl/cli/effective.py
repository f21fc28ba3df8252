"""``show``'s effective limits and notifier and ``queues list``'s job defaults: what a
job runs under and where it comes from (domain/queue_defaults.py, api/effective.py)."""

from __future__ import annotations

from typing import Any

from rich.markup import escape as esc

from jobctl.domain.resources import describe, from_json


def limits_line(job: dict[str, Any]) -> str:
    """The limits the next attempt runs under, each group with where it comes from:
    ``nice 5 (job); memory 1 GiB (queue batch)`` (domain/queue_defaults.py)."""
    effective = job.get("effective")
    if effective is None:  # an answer without it (a job list's item): the job's own
        return describe(from_json(job.get("resources")))
    limits = effective.get("resources") or {}
    if not limits:
        return "none"
    by_source: dict[str, dict[str, Any]] = {}
    for name, source in (effective.get("resources_from") or {}).items():
        by_source.setdefault(source, {})[name] = limits[name]
    return "; ".join(f"{describe(from_json(v))} ({esc(k)})" for k, v in by_source.items())


def notifier_line(job: dict[str, Any]) -> str | None:
    """The notifier a death would run, and where it comes from; None: there is none."""
    effective = job.get("effective") or {}
    command = effective.get("on_failure") or job.get("on_failure")
    if not command:
        return None
    source = effective.get("on_failure_from") or "job"
    return f"{esc(command)} ({esc(source)})"


def queue_defaults(q: dict[str, Any]) -> str:
    """A queue's defaults for its jobs, one cell: ``memory 1 GiB; on failure: CMD``."""
    parts = []
    if q.get("resources"):
        parts.append(describe(from_json(q["resources"])))
    if q.get("on_failure"):
        parts.append(f"on failure: {q['on_failure']}")
    return "; ".join(parts) or "-"
