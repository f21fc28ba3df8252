"""How long finished jobs and audit records are kept: the defaults and the cut-offs.

Pure policy, shared by the reaper (which prunes on its schedule) and the API's
``/v1/prune`` dry run (which only counts); the daemon's configuration may override the
ages per final status (``retention.*``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

#: Defaults: keep succeeded and cancelled jobs a week, dead ones a month.
DEFAULT_RETENTION: dict[str, float] = {
    "succeeded": 7 * 86400.0,
    "cancelled": 7 * 86400.0,
    "dead": 30 * 86400.0,
}
#: Audit records are kept 90 days unless ``retention.audit`` says otherwise.
DEFAULT_AUDIT_RETENTION = 90 * 86400.0


def cutoffs(retention: Mapping[str, float], now: datetime) -> dict[str, datetime]:
    """Per final status, the finish time before which a job is past its retention age."""
    return {status: now - timedelta(seconds=age) for status, age in retention.items()}
