"""The host's local time zone, by IANA name.

Schedules store their zone by name (so "Europe/Berlin" keeps meaning Berlin through DST
and tzdata updates), and local wall times given to ``--at`` must be read in the real zone,
not today's fixed offset. Order: ``$TZ``, ``/etc/timezone``, the ``/etc/localtime``
symlink target, else UTC.
"""

from __future__ import annotations

import os
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def _valid(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def local_zone_name() -> str:
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz and _valid(tz):
        return tz
    try:
        with open("/etc/timezone") as file:  # not pathlib: it costs start-up time
            name = file.read().strip()
        if name and _valid(name):
            return name
    except OSError:
        pass
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:
        target = ""
    if "zoneinfo/" in target:
        name = target.split("zoneinfo/", 1)[1]
        if _valid(name):
            return name
    return "UTC"


def local_zone() -> ZoneInfo:
    return ZoneInfo(local_zone_name())
