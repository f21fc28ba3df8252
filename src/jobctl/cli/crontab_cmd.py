"""``jobctl import-crontab``: turn a crontab into schedules, idempotently.

The meaning of each line is :mod:`jobctl.domain.crontab`'s; this module decides what to
do with it. Decisions, and why:

* **Names are content hashes** (``crontab-<8 hex>``, :func:`schedule_name`). The daemon
  refuses a second live schedule with a name, so importing the same file again (or a
  file that gained lines) creates only what is new, with no state kept on the client.
  Policies are not part of the name (re-importing with another ``--misfire`` reports
  "exists" and changes nothing), and a deleted schedule frees its name, so deleting
  one and importing again re-creates it: that is how to apply new options.
* **All or nothing on errors.** If any line has an error, nothing is created and the
  command exits 2, like ``crontab FILE`` refusing to install a file with errors: a
  half-imported crontab leaves you to work out which half landed. Unsupported lines
  (``@reboot``, ``MAILFROM``) are listed but do not block the rest.
* **Policies are jobctl's defaults** (``--misfire once``, ``--max-attempts 3``, overlap
  skip), so an imported entry is exactly what ``jobctl add --cron`` would create and the
  schedules documentation applies unchanged. Cron itself skips runs missed while the
  host was down and never retries; ``--misfire skip --max-attempts 1`` asks for that.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobctl.cli.bodies import job_body
from jobctl.cli.options import JsonOpt, SocketOpt, client, print_json
from jobctl.cli.schedules import schedule_body
from jobctl.domain.schedule import Misfire, Overlap
from jobctl.errors import Conflict, DaemonUnavailable, InvalidInput, NotFound

if TYPE_CHECKING:
    from rich.table import Table

    from jobctl.client import Client
    from jobctl.domain.crontab import Entry, Problem

_STYLE = {"create": "green", "created": "green", "exists": "dim", "unsupported": "yellow"}


@dataclass
class Row:
    """One line of the plan: what the line is and what happens to it.

    ``action`` is ``create`` (would be created: dry run, or blocked by errors),
    ``created``, ``exists`` (a live schedule has this name), ``unsupported`` or ``error``.
    """

    line: int
    schedule: str | None
    zone: str | None
    command: str
    name: str | None
    action: str
    note: str = ""
    id: str | None = None
    body: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "body"}


def import_crontab(
    file: Annotated[
        Path,
        typer.Argument(
            metavar="FILE|-",
            allow_dash=True,
            dir_okay=False,
            show_default=False,
            help="The crontab (as 'crontab -l' prints it); - or none: standard input",
        ),
    ] = Path("-"),
    tz: Annotated[
        str | None,
        typer.Option(help="Zone of entries before any CRON_TZ line", show_default="host zone"),
    ] = None,
    misfire: Annotated[
        Misfire, typer.Option(help="Missed occurrences after downtime (cron: skip)")
    ] = Misfire.ONCE,
    max_attempts: Annotated[
        int, typer.Option(min=1, help="Failures allowed before dead (cron: 1)")
    ] = 3,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be created; create nothing")
    ] = False,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Create a schedule for each entry of a crontab; importing it again creates nothing twice.

    Each entry runs as SHELL -c COMMAND (default /bin/sh) in HOME (default your home), with the crontab's variables in its environment, in the zone of the last CRON_TZ line above it (else --tz, else the host zone). Its name is crontab- and a hash of the entry, so an entry that exists is reported, not created again. '%' input is fed to the command as cron does. MAILTO mails a run that ends dead (jobctl's failure notification; cron mails every run's output). @reboot and MAILFROM are listed as unsupported and skipped. If any line has an error nothing is created and the exit status is 2. Example: crontab -l | jobctl import-crontab --dry-run
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    from jobctl.domain.cron import load_zone
    from jobctl.domain.crontab import parse_crontab  # imported on use: start-up time
    from jobctl.localzone import local_zone_name

    zone = tz or local_zone_name()
    load_zone(zone)  # a bad --tz is a usage error before anything is read
    rows = _plan(parse_crontab(_read(file)), zone, str(Path.home()), misfire, max_attempts)
    blocked = any(r.action == "error" for r in rows)
    _apply(rows, socket, dry_run or blocked)
    if json_:
        print_json({"dry_run": dry_run, "lines": [r.to_json() for r in rows]})
    else:
        _show(rows, dry_run)
    _fail_on_errors(rows, blocked)


def _read(file: Path) -> str:
    """The crontab text; a terminal on stdin is refused rather than waited on."""
    if str(file) == "-":
        if sys.stdin.isatty():
            raise InvalidInput(
                "give a crontab FILE, or pipe one in: crontab -l | jobctl import-crontab"
            )
        return sys.stdin.read()
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"no such file: {file}") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"{file} is not UTF-8 text") from None
    except OSError as exc:
        raise InvalidInput(f"cannot read {file}: {exc.strerror}") from None


def _plan(
    items: list[Entry | Problem], zone: str, home: str, misfire: Misfire, max_attempts: int
) -> list[Row]:
    """A row per entry and per problem line; entries carry the API body to create."""
    from jobctl.domain.crontab import Problem, schedule_name

    rows: list[Row] = []
    first_line: dict[str, int] = {}
    for item in items:
        if isinstance(item, Problem):
            shown = item.command if item.command is not None else item.text
            rows.append(Row(item.line, item.expression, None, shown, None, item.kind, item.message))
            continue
        tz, cwd, env = item.zone or zone, item.home or home, dict(item.env)
        name = schedule_name(item.expression, tz, item.argv, env, cwd)
        row = Row(item.line, item.expression, tz, item.command.strip(), name, "create")
        row.note = _user_column_note(item.command)
        if name in first_line:
            row.action, row.note = "exists", f"same entry as line {first_line[name]}"
        else:
            first_line[name] = item.line
            job = job_body(
                item.argv, cwd=cwd, env=[f"{k}={v}" for k, v in env.items()],
                max_attempts=max_attempts,
            )  # fmt: skip
            row.body = schedule_body(
                job, item.expression, None, None, tz, name, misfire, 100, Overlap.SKIP, None
            )
        rows.append(row)
    return rows


def _user_column_note(command: str) -> str:
    """A warning for a line of a system crontab (``/etc/crontab``, ``/etc/cron.d``), whose
    sixth field names the user: read as a user's crontab, that name becomes the command
    (``root cd / && run-parts ...`` runs ``root``, which fails with 127, every time)."""
    import pwd
    import shutil

    first = command.split(maxsplit=1)[0] if command.strip() else ""
    if not first or "/" in first or shutil.which(first):
        return ""
    try:
        pwd.getpwnam(first)
    except KeyError:
        return ""
    return (
        f"starts with the user name {first!r}: a system crontab's user column? "
        "(this reads crontab -l's format: the command would be the name)"
    )


def _apply(rows: list[Row], socket: Path | None, dry_run: bool) -> None:
    """Create the entries (a request per :data:`CHUNK`, each entry answering alone; a name
    that is taken is "exists"), or for a dry run only look up which exist."""
    todo = [r for r in rows if r.action == "create"]
    if not todo:
        return
    with client(socket) as c:
        if dry_run:
            try:
                for row in todo:
                    _mark_if_exists(c, row)
            except DaemonUnavailable as exc:
                sys.stderr.write(
                    f"jobctl: warning: {exc.message}; cannot tell which entries exist\n"
                )
            return
        for start in range(0, len(todo), CHUNK):
            _create(c, todo[start : start + CHUNK])


#: Entries per creation request (the API takes up to 1,000 schedules in one).
CHUNK = 1000


def _mark_if_exists(c: Client, row: Row) -> None:
    assert row.name is not None
    try:
        found = c.schedule(row.name)  # a name means the caller's live schedule
    except NotFound:
        return
    row.action, row.id = "exists", found["id"]


def _create(c: Client, rows: list[Row]) -> None:
    """Create ``rows`` in one request; a name taken (its item answers 409 ``conflict``,
    maybe in a race) is "exists", not an error."""
    answers = c.create_schedules([row.body for row in rows if row.body is not None])
    for row, answer in zip(rows, answers, strict=True):
        if answer["created"]:
            row.action, row.id = "created", answer["id"]
        elif answer["error"]["code"] == Conflict.code:
            row.action = "exists"
            _mark_if_exists(c, row)
        else:  # the daemon knows something this client did not check
            row.action, row.note = "error", answer["error"]["message"]


def _fail_on_errors(rows: list[Row], blocked: bool) -> None:
    """Exit 2 naming the error lines; say whether anything was created despite them."""
    bad = [str(r.line) for r in rows if r.action == "error"]
    if not bad:
        return
    outcome = "nothing was created" if blocked else "the other entries were created"
    raise InvalidInput(
        f"{len(bad)} line(s) of the crontab have errors (line {', '.join(bad)}); {outcome}"
    )


def _show(rows: list[Row], dry_run: bool) -> None:
    from jobctl.cli import render  # rich costs start-up time: load it only to draw

    if rows:
        render.console.print(_table(rows))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.action] = counts.get(r.action, 0) + 1
    parts = [f"{n} {action}" for action, n in counts.items()] or ["no entries"]
    prefix = "dry run, nothing created: " if dry_run else ""
    render.console.print(prefix + ", ".join(parts), markup=False)


def _table(rows: list[Row]) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold")
    for col in ("LINE", "SCHEDULE", "ZONE", "COMMAND", "NAME", "ACTION", "NOTE"):
        table.add_column(col, no_wrap=col in ("LINE", "SCHEDULE", "ZONE", "NAME", "ACTION"))
    for r in rows:
        style = _STYLE.get(r.action, "red")
        table.add_row(
            str(r.line),
            Text(r.schedule or "-"),
            r.zone or "-",
            Text(r.command),
            r.name or "-",
            Text(r.action, style=style),
            Text(r.note),
        )
    return table
