"""``jobctl next``: when would a cron expression fire?  Local, no daemon needed.

Prints the next fire times in UTC and in the schedule's zone, like
``systemd-analyze calendar``, so a schedule can be checked before it is created,
DST edges included.  Start-up matters for a command like this: it imports only the
cron evaluator (lazily, so other commands do not pay for it) and prints plain text;
no client, no rich.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from jobctl.cli.options import print_json

if TYPE_CHECKING:
    from collections.abc import Iterator

    from jobctl.domain.cron import CronExpr

# Instants whose local time is representable in every zone (offsets stay under a day).
_FIRST = datetime(1, 1, 2, tzinfo=UTC)
_LAST = datetime(9999, 12, 31, tzinfo=UTC)
_JsonList = Annotated[
    bool, typer.Option("--json", help="Print a JSON list of UTC ISO-8601 times instead")
]


def next_(
    expression: Annotated[
        str,
        typer.Argument(
            metavar="EXPR",
            help="Cron expression in quotes, e.g. '0 6 * * 1-5', or a macro such as @daily",
        ),
    ],
    tz: Annotated[
        str | None,
        typer.Option("--tz", help="IANA time zone of the schedule", show_default="host zone"),
    ] = None,
    after: Annotated[
        str | None,
        typer.Option(
            help="Start after this instant (exclusive): ISO-8601, or a wall time in --tz",
            show_default="now",
        ),
    ] = None,
    count: Annotated[int, typer.Option(min=1, max=1000, help="How many fire times")] = 5,
    json_: _JsonList = False,
) -> None:
    """Show the next fire times of a cron expression, in UTC and in its time zone.

    Runs locally (no daemon) with the same evaluator and DST rules as schedules. Example: jobctl next '30 2 * * *' --tz America/New_York --count 3
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    from jobctl.domain.cron import describe, iter_fires, load_zone, parse_cron
    from jobctl.domain.durations import parse_when
    from jobctl.errors import InvalidInput, InvalidSchedule
    from jobctl.localzone import local_zone_name

    expr = parse_cron(expression)
    zone_name = tz if tz is not None else local_zone_name()
    zone = load_zone(zone_name)
    try:
        # The one clock read of this command, at the CLI boundary.
        start = parse_when(after, zone) if after is not None else datetime.now(UTC)
        in_range = _FIRST <= start <= _LAST
    except OverflowError:  # a wall time whose UTC time is before year 1 or after 9999
        in_range = False
    if not in_range:
        raise InvalidInput(f"--after {after!r} is out of range (years 1 to 9999)")
    fires = _take(iter_fires(expr, zone, start), count)
    if not fires:
        raise InvalidSchedule(f"'{expr.text}' has no fire time before year 10000")

    if json_:
        print_json([_utc_iso(fire) for fire in fires])
        return
    host = "" if tz is not None else " (host zone)"
    lines = [
        f"expression: {_normalized(expr)}",
        f"zone:       {zone.key}{host}",
        f"meaning:    {describe(expr)}",
        f"after:      {_utc_text(start)}{'' if after is not None else ' (now)'}",
        "",
    ]
    for fire in fires:
        local = fire.astimezone(zone)
        lines.append(f"{_utc_text(fire)}  {_local_text(local)}{_note(expr, local)}")
    if len(fires) < count:
        lines.append(f"(no more fire times before year 10000; {len(fires)} of {count} shown)")
    typer.echo("\n".join(lines))


def _take(fires: Iterator[datetime], count: int) -> list[datetime]:
    """Up to ``count`` fires; fewer when the next one would be past UTC year 9999."""
    taken: list[datetime] = []
    try:
        for fire in fires:
            taken.append(fire)
            if len(taken) == count:
                break
    except OverflowError:  # the evaluator's datetime arithmetic ran past year 9999
        pass
    return taken


def _normalized(expr: CronExpr) -> str:
    """The five fields single-spaced; a macro also shows what it stands for."""
    fields = " ".join(expr.fields)
    return fields if fields == expr.text else f"{expr.text} = {fields}"


def _wall(instant: datetime, sep: str) -> str:
    """``YYYY-MM-DD<sep>HH:MM:SS`` (isoformat pads years below 1000; strftime may not)."""
    return instant.replace(tzinfo=None, microsecond=0).isoformat(sep)


def _utc_iso(instant: datetime) -> str:
    return _wall(instant.astimezone(UTC), "T") + "Z"


def _utc_text(instant: datetime) -> str:
    return _wall(instant.astimezone(UTC), " ") + "Z"


def _local_text(local: datetime) -> str:
    return f"{_wall(local, ' ')} {local.tzname()} ({_offset_text(local.utcoffset())})"


def _offset_text(offset: timedelta | None) -> str:
    seconds = int(offset.total_seconds()) if offset is not None else 0
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}"
    return f"{text}:{secs:02d}" if secs else text


def _note(expr: CronExpr, local: datetime) -> str:
    """Flag the fires that DST moved or repeated, so the output explains itself."""
    if not _matches(expr, local):
        return "  (moved: the scheduled time falls in a DST gap)"
    if local.fold:
        return "  (repeated wall time, second pass)"
    return ""


def _matches(expr: CronExpr, local: datetime) -> bool:
    """Whether ``local`` is a wall time ``expr`` names (False: moved by a DST gap)."""
    if not (expr.minutes >> local.minute & 1 and expr.hours >> local.hour & 1):
        return False
    if not expr.months >> local.month & 1:
        return False
    by_day = bool(expr.days >> local.day & 1)
    by_weekday = bool(expr.weekdays >> (local.isoweekday() % 7) & 1)
    if expr.dom_star or expr.dow_star:  # Vixie: both day fields must match
        return by_day and by_weekday
    return by_day or by_weekday
