"""``jobctl next``: when would a cron expression fire?  Local, no daemon needed.

Prints the next fire times in UTC and in the schedule's zone, like
``systemd-analyze calendar``, so a schedule can be checked before it is created,
DST edges included.  This is the Typer declaration of the command (its options, help
text, and so the man page and completions); the work is done by
:func:`jobctl.cli.next_fast.show_next`, which ``jobctl next`` also reaches without
importing Typer at all (see :func:`jobctl.cli.main.run`): start-up is most of this
command's run time.
"""

from __future__ import annotations

from typing import Annotated

import typer

from jobctl.cli.next_fast import DEFAULT_COUNT, MAX_COUNT, show_next

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
    count: Annotated[
        int, typer.Option("--count", "-n", min=1, max=MAX_COUNT, help="How many fire times")
    ] = DEFAULT_COUNT,
    json_: _JsonList = False,
    seed: Annotated[
        str | None,
        typer.Option(
            metavar="ID",
            help="Schedule id that H fields are hashed from (needed for an expression with H)",
        ),
    ] = None,
) -> None:
    """Show the next fire times of a cron expression, in UTC and in its time zone.

    Runs locally (no daemon) with the same evaluator and DST rules as schedules. Extended syntax: L, LW, 15W, 1#2 (second Monday), 5L (last Friday) and hashed H. Example: jobctl next '30 2 * * *' --tz America/New_York --count 3
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    show_next(expression, tz, after, count, json_, seed)
