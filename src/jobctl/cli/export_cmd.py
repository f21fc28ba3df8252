"""``jobctl export``: jobs, attempts or schedules as JSON lines or CSV, from the database file.

The rows come from :mod:`jobctl.store.export` (sqlite-utils, read-only).  Why the file
and not the API: an export is what one does to move or audit data, also with the daemon
stopped, and reading the file needs no new authorization rule: the file's permissions
are the rule (see that module).  Non-admin users of a shared daemon use ``--json`` of
``jobctl list`` and ``jobctl schedules list`` instead, which the API filters per owner.
"""

from __future__ import annotations

import csv
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from jobctl.errors import JobctlError


class What(StrEnum):
    jobs = "jobs"
    attempts = "attempts"
    schedules = "schedules"


class Format(StrEnum):
    jsonl = "jsonl"
    csv = "csv"


def export(
    what: Annotated[What, typer.Argument(metavar="WHAT", help="jobs, attempts or schedules")],
    format_: Annotated[
        Format, typer.Option("--format", "-f", help="JSON lines (one object a line) or CSV")
    ] = Format.jsonl,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", dir_okay=False, help="Write here", show_default="stdout"),
    ] = None,
    owner: Annotated[int | None, typer.Option(min=0, help="Only this uid's rows")] = None,
    db: Annotated[
        str | None,
        typer.Option(
            envvar="JOBCTL_DB",
            show_envvar=True,
            help="The database to read (read-only): a SQLite file or a postgresql:// URL",
            show_default="per-user state dir",
        ),
    ] = None,
) -> None:
    """Export jobs, attempts or schedules as JSON lines or CSV, read from the database file.

    Reads the file read-only (safe while the daemon runs): who can read the file can export it, and nobody else; without access to the file, use jobctl list --json or jobctl schedules list --json (your own rows, through the daemon). With a postgresql:// --db it reads the database in one read-only transaction (its grants decide who may), with the same columns and order. Times are ISO-8601 UTC; command, env and template are JSON (in CSV, JSON text). Jobs hold their environment: treat an export like the database. Example: jobctl export jobs --format csv -o jobs.csv
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    from jobctl.cli.backup import sqlite_source
    from jobctl.config import PG_SCHEMES

    if db is not None and db.startswith(PG_SCHEMES):
        columns, rows = _from_postgres(db, what.value, owner)
    else:
        from jobctl.store import export as store_export

        database = store_export.open_readonly(sqlite_source(db))
        rows = store_export.rows(database, what.value, owner)
        columns = store_export.columns(database, what.value)
    if output is None:
        count = _write(sys.stdout, format_, columns, rows)
        return
    with output.open("w", encoding="utf-8", newline="") as out:
        count = _write(out, format_, columns, rows)
    print(f"exported {count} {what.value} to {output}", file=sys.stderr)


def _from_postgres(url: str, what: str, owner: int | None) -> tuple[list[str], Any]:
    """The columns and rows of an export from a PostgreSQL database (same as SQLite's)."""
    try:
        from jobctl.store.pg import export as pg_export
    except ImportError as exc:  # psycopg: the extra 'postgres'
        raise JobctlError(
            f"PostgreSQL support is not installed ({exc.name}): "
            "pip install 'jobctl-scheduler[postgres]'"
        ) from None
    return pg_export.export(url, what, owner)


def _write(out: IO[str], format_: Format, columns: list[str], rows: Any) -> int:
    count = 0
    if format_ is Format.csv:
        writer = csv.DictWriter(out, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(v) for k, v in row.items()})
            count += 1
        return count
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
        count += 1
    return count


def _cell(value: Any) -> Any:
    """A CSV cell: JSON values as their JSON text, the rest as they are."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, list | dict) else value
