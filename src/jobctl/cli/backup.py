"""``jobctl backup``: a consistent, checked copy of the database, safe while the daemon runs.

Why this way:

* SQLite's online backup API copies the pages inside **one read transaction** (one
  ``backup`` step), so the copy is the database as of one committed instant. The
  database is in WAL mode, where a reader never blocks the daemon's writer, and the
  source is opened read-only (``mode=ro``) so this command cannot change it.
  Copying the file with ``cp`` instead can tear a page or miss the ``-wal`` file.
* The copy is written to ``FILE.tmp``, switched to a rollback journal (so it is one
  self-contained file, no ``-wal`` beside it), checked with ``PRAGMA integrity_check``,
  fsynced, and only then renamed over ``FILE``: ``FILE`` is always a complete, checked
  copy, never a half-written one, even with ``--force`` over an older backup.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer

from jobctl.config import PG_SCHEMES, shown_db
from jobctl.errors import Conflict, InvalidInput, JobctlError, NotFound, StoreError
from jobctl.paths import default_db

#: How long to wait for a lock the daemon holds (a checkpoint), in seconds.
BUSY_TIMEOUT = 10.0


@dataclass(frozen=True)
class Checked:
    """What the verified copy holds."""

    size: int
    schema_version: int
    jobs: int
    schedules: int


def backup(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", dir_okay=False, help="Where to write the copy")
    ],
    db: Annotated[
        str | None,
        typer.Option(
            envvar="JOBCTL_DB",
            show_envvar=True,
            help="The database to copy (a SQLite file; a postgresql:// URL is refused)",
            show_default="per-user state dir",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace FILE if it exists")] = False,
) -> None:
    """Copy the database consistently while the daemon runs, check the copy, and print what it holds.

    Uses SQLite's online backup (one read transaction, so the copy is one committed instant; the daemon keeps writing meanwhile). The copy goes to FILE.tmp, passes PRAGMA integrity_check, and is then renamed to FILE. Attempt logs (logs/ beside the database) are not part of it.

    A PostgreSQL database (--db postgresql://...) is not copied: the command says how to back it up with pg_dump and exits with status 2.

    To restore: stop the daemon; move the database and its -wal and -shm files away; copy FILE to the database path; start the daemon. Jobs that were running at backup time are reclaimed as after a crash, and work finished after the backup may run again.
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    if db is not None and db.startswith(PG_SCHEMES):
        raise InvalidInput(pg_dump_advice(file, db))
    try:
        _backup(file, sqlite_source(db), force)
    except OSError as exc:  # a name too long, no such directory, no room: one line, no bug
        where = exc.filename or file
        raise JobctlError(f"backup {file}: {where}: {exc.strerror or exc}") from None


def sqlite_source(db: str | None) -> Path:
    """The SQLite file ``--db`` names, else the default one; when the default is not
    there, say how to name the daemon's: a daemon started with ``--db`` elsewhere left a
    user reading only "no database at /var/lib/jobctl/jobctl.db"."""
    if db:
        return Path(db)
    path = default_db()
    if not path.is_file():
        raise NotFound(
            f"no database at {path} (the default); give the daemon's with --db or "
            "JOBCTL_DB: 'jobctl config get db' prints it",
            path=str(path),
        )
    return path


def pg_dump_advice(file: Path, url: str) -> str:
    """What to run instead on a PostgreSQL store: ``pg_dump`` of that database (one
    consistent snapshot, taken while the daemons run), the password masked."""
    shown = shown_db(url)
    name = urlsplit(url).path.lstrip("/") or "(the user's default database)"
    hidden = " (the password is shown as ***: give it in ~/.pgpass or PGPASSWORD)"
    return (
        f"the database is PostgreSQL ({name}), which jobctl backup does not copy; back it up "
        f"with pg_dump, safe while the daemons run: pg_dump --format=custom --file={file} "
        f"--dbname='{shown}'{hidden if shown != url else ''}; restore with pg_restore into an "
        "empty database (docs/operations.md, Backup on PostgreSQL)"
    )


def _backup(file: Path, source: Path, force: bool) -> None:
    if not source.is_file():
        raise NotFound(f"no database at {source}", path=str(source))
    if file.exists() and not force:
        raise Conflict(f"{file} exists; give --force to replace it", path=str(file))
    if file.exists() and file.resolve() == source.resolve():
        raise InvalidInput(f"{file} is the database itself")
    tmp = file.with_name(file.name + ".tmp")
    try:
        _copy(source, tmp)
        checked = _verify(tmp)
        _fsync(tmp)
        os.replace(tmp, file)
        _fsync(file.parent)
    finally:
        tmp.unlink(missing_ok=True)
    print(
        f"backup {file}: {_size(checked.size)}, schema version {checked.schema_version}, "
        f"{checked.jobs} jobs, {checked.schedules} schedules; integrity_check ok"
    )


def _copy(source: Path, tmp: Path) -> None:
    """Online-backup ``source`` into a fresh ``tmp`` (mode 0600: jobs hold environments)."""
    import sqlite3  # imported on use: every jobctl command would pay for it otherwise

    tmp.unlink(missing_ok=True)  # left over by an interrupted backup
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        raise InvalidInput(f"cannot write {tmp}: {exc.strerror}") from None
    try:  # a file this user may not read failed here with an internal error
        src = sqlite3.connect(
            f"{source.absolute().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT
        )
    except sqlite3.DatabaseError as exc:
        denied = (
            ""
            if os.access(source, os.R_OK)
            else " (permission denied: run it as root or the daemon's user)"
        )
        raise StoreError(f"cannot read {source}: {exc}{denied}") from None
    try:
        dst = sqlite3.connect(tmp, timeout=BUSY_TIMEOUT)
        try:
            src.backup(dst)  # pages=-1: every page in one step, one read transaction
            dst.execute("PRAGMA journal_mode=DELETE")
        finally:
            dst.close()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot back up {source}: {exc}") from None
    finally:
        src.close()


def _verify(path: Path) -> Checked:
    """Open the copy read-only, run ``integrity_check`` and read what it holds."""
    import sqlite3

    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
        if problems != ["ok"]:
            raise StoreError(
                f"the copy failed PRAGMA integrity_check ({len(problems)} problem(s), first: "
                f"{problems[0]}); nothing was written"
            )
        version = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
        jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        schedules = 0
        if version >= 2:  # schedules arrived with migration 0002
            schedules = conn.execute(
                "SELECT count(*) FROM schedules WHERE deleted_at IS NULL"
            ).fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"the copy is not a readable jobctl database: {exc}") from None
    finally:
        conn.close()
    return Checked(path.stat().st_size, int(version or 0), int(jobs), int(schedules))


def _fsync(path: Path) -> None:
    """Flush a file, or a directory's entries (so the rename survives a power cut)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    size = n / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
