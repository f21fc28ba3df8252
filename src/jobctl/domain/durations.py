"""Parsing of the human time inputs the CLI and API accept.

DURATION: ``250ms``, ``90s``, ``5m``, ``2h``, ``1d``, ``1w`` or compounds like ``1h30m``;
a bare number is seconds. WHEN: ISO-8601 with an offset (``2027-03-14T06:00:00+09:00``,
``...Z``) or a local wall time without one (``2027-03-14 06:00``), read in the zone the
caller passes. Errors name the input and say what is accepted.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo

from jobctl.errors import InvalidInput

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(text: str) -> float:
    """Seconds in ``text``; raises :class:`InvalidInput` with the accepted forms."""
    s = text.strip().lower()
    try:
        value = float(s)
    except ValueError:
        pos, total = 0, 0.0
        for m in _PART.finditer(s):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if pos != len(s) or not s:
            raise InvalidInput(
                f"invalid duration {text!r}: use e.g. 250ms, 90s, 5m, 2h, 1d or 1h30m"
            ) from None
        value = total  # finite unless absurdly long (9 * 400 digits): checked below
    if not 0 <= value < float("inf"):
        raise InvalidInput(f"invalid duration {text!r}: must be a finite number >= 0")
    return value


def format_duration(seconds: float) -> str:
    """Short human form: ``1h2m``, ``45s``, ``250ms``."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    total = int(round(seconds))
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size:
            out.append(f"{total // size}{unit}")
            total %= size
    return "".join(out[:2])


def parse_when(text: str, local: tzinfo) -> datetime:
    """An absolute instant; naive input is wall time in ``local``."""
    s = text.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise InvalidInput(
            f"invalid time {text!r}: use ISO-8601, e.g. 2027-03-14T06:00:00+09:00 "
            "or 2027-03-14 06:00 (local time)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=local)
    try:
        return dt.astimezone(UTC)
    except OverflowError:  # 9999-12-31 23:00 west of UTC is in the year 10000, etc.
        raise InvalidInput(
            f"invalid time {text!r}: out of range (years 1 to 9999 in UTC)"
        ) from None
