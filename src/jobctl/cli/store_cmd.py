"""``jobctl store migrate``: move a single host's SQLite store into PostgreSQL.

It works on the file and the database directly (no daemon: the SQLite file is locked as
a daemon locks it, so a daemon running on it refuses the move); the work is
:mod:`jobctl.store.pg.move`. Progress goes to stderr, the summary to stdout.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from jobctl.cli.options import command_group
from jobctl.errors import JobctlError

app = command_group("The store itself: move a SQLite store into PostgreSQL.")


@app.command("migrate")
def migrate(
    to: Annotated[
        str,
        typer.Option(
            "--to", metavar="URL", help="The PostgreSQL database: postgresql://user@host/dbname"
        ),
    ],
    from_: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="SOURCE",
            help="The SQLite store: sqlite:///path/jobctl.db or a path",
            show_default="per-user state dir",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Empty a target that holds jobctl rows first (they are lost)"),
    ] = False,
) -> None:
    """Move a SQLite store into a PostgreSQL database, all or nothing, keeping every id and key.

    Stop the daemon first: a daemon running on the SQLite file refuses the move. Moves jobs with their attempts, schedules with their cursors (nothing fires twice: occurrence keys and cursors are kept), queues with their limits and state, the dead-letter queue, webhook secrets (as stored) and the audit trail; the job counts are recomputed and every id sequence is set past the highest id, so no id is reused. One PostgreSQL transaction: on any failure the target is left as it was. A target that holds rows is refused unless --force; one a daemon is live on, always. Then start the daemons with --db URL. Example: jobctl store migrate --from sqlite:///var/lib/jobctl/jobctl.db --to postgresql://jobctl@db.example/jobctl
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    from jobctl.paths import default_db

    try:
        from jobctl.store.pg import move as pgmove
    except ImportError as exc:  # psycopg: the extra 'postgres'
        raise JobctlError(
            f"PostgreSQL support is not installed ({exc.name}): "
            "pip install 'jobctl-scheduler[postgres]'"
        ) from None

    source = pgmove.sqlite_path(str(default_db()) if from_ is None else from_)
    pgmove.check_url(to)
    try:
        moved = pgmove.move(source, to, force=force, progress=_progress)
    except OSError as exc:  # a name too long, no permission on the file or its directory
        where = exc.filename or source
        raise JobctlError(f"store migrate: {where}: {exc.strerror or exc}") from None
    counts = ", ".join(f"{n} {table}" for table, n in moved.rows.items())
    rate = moved.jobs / moved.seconds if moved.seconds > 0 else 0.0
    print(
        f"moved {source} into {pgmove.shown_url(to)} in {moved.seconds:.1f} s "
        f"({rate:.0f} jobs/s): {counts}; next job id {moved.next_job_id}"
    )


def _progress(line: str) -> None:
    print(f"jobctl: store migrate: {line}", file=sys.stderr, flush=True)
