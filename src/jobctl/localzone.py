"""The host's local time zone, by IANA name.

Schedules store their zone by name (so "Europe/Berlin" keeps meaning Berlin through DST
and tzdata updates), and local wall times given to ``--at`` must be read in the real zone,
not today's fixed offset. Order: ``$TZ``, ``/etc/timezone``, the ``/etc/localtime``
symlink target, else UTC.

A ``$TZ`` that is set but names no zone is an error, not a quiet fall back to UTC: a
schedule would then fire at the wrong hour and an ``--at`` time would mean another instant,
with nothing to tell the user why.
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


def _tz_name(raw: str) -> str:
    """The IANA name ``$TZ`` gives (``Europe/Berlin``, ``:Europe/Berlin`` or a path into a
    zoneinfo directory); InvalidInput naming the variable for anything else (a POSIX
    rule such as ``CET-1CEST`` has no name a schedule could be stored under)."""
    name = raw.lstrip(":")
    if name.startswith("/") and "zoneinfo/" in name:
        name = name.split("zoneinfo/", 1)[1]
    if name and name != "localtime" and _valid(name):
        return name
    from jobctl.errors import InvalidInput

    hint = ""
    try:
        from jobctl.domain.cron import load_zone

        load_zone(name)
    except InvalidInput as exc:
        hint = exc.message.partition("(")[2].rstrip(")")  # "did you mean X?" if any
    raise InvalidInput(
        f"environment variable TZ={raw!r} is not a known time zone"
        + (f" ({hint})" if hint else "")
        + "; set TZ to an IANA name such as Europe/Berlin, or unset it for the host's zone",
        zone=raw,
    )


def local_zone_name() -> str:
    """The local zone's IANA name; raises InvalidInput if ``$TZ`` is set to no zone."""
    raw = os.environ.get("TZ", "")
    if raw:
        return _tz_name(raw)
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
