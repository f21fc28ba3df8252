"""``jobctl next`` itself: the computation and output, and a lean reader of its arguments.

Start-up is most of this command's run time, and Typer with every command module costs
~0.4 s of it, so :func:`jobctl.cli.main.run` hands ``jobctl next ...`` to this module
before anything imports Typer.  This module imports only the cron evaluator (and the
``--after`` parser when that option is given): no Typer, pydantic, rich or client.

There is one implementation: :func:`show_next` computes and prints; the Typer command in
:mod:`jobctl.cli.next_cmd` (which ``--help``, the man page and the completions are made
from) is a thin front over it, so both paths print the same bytes.

:func:`parse_argv` accepts only command lines it reads exactly as Click reads them.  For
anything else (``--help``, an unknown or malformed option, a missing or extra argument,
a ``--count`` that is not a plain number from 1 to 1000) it returns None and the caller
runs the Typer command, so usage errors keep Click's own messages.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Iterator
    from zoneinfo import ZoneInfo

    from jobctl.domain.cron import CronExpr

# Instants whose local time is representable in every zone (offsets stay under a day).
_FIRST = datetime(1, 1, 2, tzinfo=UTC)
_LAST = datetime(9999, 12, 31, tzinfo=UTC)
DEFAULT_COUNT = 5
MAX_COUNT = 1000
_VALUE_OPTIONS = ("--tz", "--after", "--count", "--seed")


class NextArgs(NamedTuple):
    """The arguments of ``jobctl next``, as the Typer command receives them."""

    expression: str
    tz: str | None = None
    after: str | None = None
    count_: int = DEFAULT_COUNT  # (not `count`: tuple has a count method)
    json_: bool = False
    seed: str | None = None


def parse_argv(args: list[str]) -> NextArgs | None:
    """Read the arguments after ``next``; None when Click should read them instead.

    Follows Click's parser: options and the argument may come in any order, ``--``
    ends the options, ``--opt=value`` and ``--opt value`` are the same, the value after
    an option is taken whatever it looks like, and the last of a repeated option wins.
    """
    positional: list[str] = []
    values: dict[str, str] = {}
    json_ = False
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            positional.extend(rest)
            break
        if arg[:1] != "-" or len(arg) == 1:
            positional.append(arg)
            continue
        # -n is --count's short form (-n5 and -n=5 are left to Click's reading)
        name, equals, explicit = ("--count", "", "") if arg == "-n" else arg.partition("=")
        if name in _VALUE_OPTIONS:
            value = explicit if equals else next(rest, None)
            if value is None:
                return None  # "requires an argument"
            values[name] = value
        elif name == "--json" and not equals:
            json_ = True
        else:
            return None  # --help, an unknown option, --json=...
    if len(positional) != 1:
        return None  # missing EXPR, or extra arguments
    count = DEFAULT_COUNT
    if "--count" in values:
        text = values["--count"]
        if not (text.isascii() and text.isdigit() and text[0] != "0"):
            return None  # Click decides what else it accepts, and words the error
        count = int(text)
        if count > MAX_COUNT:
            return None
    return NextArgs(
        positional[0], values.get("--tz"), values.get("--after"), count, json_, values.get("--seed")
    )


def show_next(
    expression: str,
    tz: str | None = None,
    after: str | None = None,
    count: int = DEFAULT_COUNT,
    json_: bool = False,
    seed: str | None = None,
) -> None:
    """Print the next ``count`` fire times of ``expression`` (the whole of ``jobctl next``).

    ``seed`` is the schedule id that ``H`` fields are hashed from; an expression with
    ``H`` needs it, since without one there are no definite times to show.  Raises
    :class:`jobctl.errors.InvalidInput` (InvalidSchedule for the expression, the zone,
    or no fire time left) for the caller to report.
    """
    from jobctl.domain.cron import describe, iter_fires, load_zone, parse_cron
    from jobctl.errors import InvalidInput, InvalidSchedule

    expr = parse_cron(expression, seed)
    if expr.seed is not None and seed is None:
        raise InvalidInput(
            f"'{expr.text}' uses H, which is hashed from each schedule's id: pass --seed ID "
            "(a schedule's id from jobctl schedules) to see the times it gives that schedule"
        )
    if tz is not None:
        zone_name = tz
    else:
        from jobctl.localzone import local_zone_name

        zone_name = local_zone_name()
    zone = load_zone(zone_name)
    start = _start(after, zone)
    fires = _take(iter_fires(expr, zone, start), count)
    if not fires:
        raise InvalidSchedule(f"'{expr.text}' has no fire time before year 10000")

    if json_:
        import json

        _write(json.dumps([_utc_iso(fire) for fire in fires], indent=2))
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
    _write("\n".join(lines))


def _start(after: str | None, zone: ZoneInfo) -> datetime:
    """Where the listing starts: ``--after`` (a wall time in ``zone``, or with an offset),
    else now; refused outside the years a datetime can hold."""
    from jobctl.errors import InvalidInput

    try:
        if after is not None:
            from jobctl.domain.durations import parse_when

            start = parse_when(after, zone)
        else:
            start = datetime.now(UTC)  # the one clock read of this command, at the CLI boundary
        in_range = _FIRST <= start <= _LAST
    except OverflowError:  # a wall time whose UTC time is before year 1 or after 9999
        in_range = False
    if not in_range:
        raise InvalidInput(f"--after {after!r} is out of range (years 1 to 9999)")
    return start


def _write(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


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
    return expr.matches_day(local.year, local.month, local.day)
