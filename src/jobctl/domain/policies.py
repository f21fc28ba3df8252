"""Schedule policy names: tiny on purpose, the CLI imports them at start-up."""

from __future__ import annotations

from enum import StrEnum


class Misfire(StrEnum):
    """What happens to occurrences missed while the daemon was down (docs/schedules.md)."""

    SKIP = "skip"
    ONCE = "once"
    ALL = "all"


class Overlap(StrEnum):
    """What happens to an occurrence while the previous one's job is unfinished."""

    SKIP = "skip"
    QUEUE = "queue"
    ALLOW = "allow"
