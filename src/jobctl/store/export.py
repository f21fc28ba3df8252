"""Reading the database file for ``jobctl export`` and describing its schema, with sqlite-utils.

sqlite-utils is used where a person inspects or moves data: it reads tables as rows of
dicts and introspects columns, indexes, triggers and views (``docs/schema.md`` is made
from that, see :func:`render_schema`).  The daemon's hot paths keep raw sqlite3: they
are measured and tuned statement by statement (docs/dependencies.md).

Who may export what: an export reads the database **file**, opened read-only
(``mode=ro``), exactly like ``jobctl backup``.  Whoever can read that file can already
read every row in it with the sqlite3 shell, so the export grants nothing new, and
whoever cannot read it gets the operating system's "permission denied".  Users of a
shared daemon who may not read its file read their own jobs and schedules through the
API instead (``jobctl list --json``, ``jobctl schedules list --json``), where
src/jobctl/api/policy.py applies.  ``--owner`` narrows an export to one uid's rows.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jobctl.errors import InvalidInput, NotFound, StoreError

#: What can be exported: the name a user types -> the table or view read.
TABLES = {"jobs": "jobs", "attempts": "attempts", "schedules": "schedules"}
#: Integer columns holding epoch milliseconds: exported as ISO-8601 UTC text.
_TIMES = frozenset(
    {"created_at", "run_at", "lease_until", "finished_at", "scheduled_for", "started_at"}
    | {"anchor", "deleted_at", "next_run_at", "waiting", "last_skip_at", "last_skip_nominal"}
    | {"broken_at"}
)
#: Text columns holding JSON: exported as JSON values (in CSV, as their JSON text).
_JSON = frozenset(
    {"command", "env", "template", "retry_on", "no_retry_on", "resources", "notified", "http"}
    | {"payload"}
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def open_readonly(path: Path) -> Any:
    """The database at ``path`` as a read-only sqlite-utils Database (never created)."""
    import sqlite_utils

    if not path.is_file():
        raise NotFound(f"no database at {path}", path=str(path))
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=10)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read {path}: {exc}") from None
    return sqlite_utils.Database(conn)


def columns(db: Any, what: str) -> list[str]:
    """The column names of an export, in table order."""
    table = _table(db, what)
    return [c.name for c in db[table].columns]


def rows(db: Any, what: str, owner: int | None = None) -> Iterator[dict[str, Any]]:
    """The rows of ``what`` (``jobs``, ``attempts`` or ``schedules``), oldest first, with
    times as ISO-8601 UTC and JSON columns decoded; only ``owner``'s when given."""
    table = _table(db, what)
    where, params = None, None
    if owner is not None:
        if what == "attempts":  # attempts belong to the job's owner
            where = "job_id IN (SELECT id FROM jobs WHERE owner_uid = :owner)"
        else:
            where = "owner_uid = :owner"
        params = {"owner": owner}
    order = "job_id, number" if what == "attempts" else "rowid" if what == "jobs" else "id"
    try:
        for row in db[table].rows_where(where, params, order_by=order):
            yield readable(row)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read {what}: {exc}") from None


def _table(db: Any, what: str) -> str:
    if what not in TABLES:
        raise InvalidInput(f"cannot export {what!r}: choose from {', '.join(TABLES)}")
    table = TABLES[what]
    if table not in db.table_names() and table not in db.view_names():
        raise StoreError(f"the database has no {table} (is it a jobctl database?)")
    return table


def readable(row: dict[str, Any]) -> dict[str, Any]:
    """A row as exported: times as ISO-8601 UTC, JSON columns decoded (both backends)."""
    out = dict(row)
    for name, value in row.items():
        if name in _TIMES and isinstance(value, int):
            out[name] = (_EPOCH + timedelta(milliseconds=value)).isoformat().replace("+00:00", "Z")
        elif name in _JSON and isinstance(value, str):
            with contextlib.suppress(ValueError):  # not JSON after all: the text it is
                out[name] = json.loads(value)
    return out


# --- the schema, as sqlite-utils sees it ---------------------------------------------


def render_schema(conn: sqlite3.Connection) -> str:
    """``docs/schema.md``: every table and view of a migrated database, by introspection.

    Compared with the checked-in file by ``python -m jobctl.cli.docgen --check`` and by a
    test that migrates a database (fresh, and upgraded from an old version): a migration
    without a regenerated file, or an upgrade path that builds a different schema from
    a fresh one, fails.
    """
    import sqlite_utils

    db = sqlite_utils.Database(conn)
    version = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
    lines = [
        "# Database schema",
        "",
        "Generated by `python -m jobctl.cli.docgen` from a database built by the migrations",
        f"in src/jobctl/store/sql/migrations (up to {version:04d}), read back with",
        "sqlite-utils' introspection; `--check` fails when this file is stale. Do not edit.",
        "Times are epoch milliseconds (UTC); `jobctl export` shows them as ISO-8601.",
    ]
    for name in sorted(db.table_names()):
        lines += _table_lines(db[name])
    for name in sorted(db.view_names()):
        view = db[name]
        lines += ["", f"## view {name}", "", "| column | type |", "|---|---|"]
        lines += [f"| {c.name} | {c.type or '-'} |" for c in view.columns]
        lines += ["", "```sql", view.schema.strip(), "```"]
    return "\n".join(lines) + "\n"


def _table_lines(table: Any) -> list[str]:
    lines = ["", f"## {table.name}", "", "| column | type | not null | default | key |"]
    lines.append("|---|---|---|---|---|")
    for c in table.columns:
        default = "" if c.default_value is None else f"`{c.default_value}`"
        key = "primary" if c.is_pk else ""
        lines.append(f"| {c.name} | {c.type} | {'yes' if c.notnull else ''} | {default} | {key} |")
    bullets = []
    for index in sorted(table.indexes, key=lambda i: i.name):
        if index.origin == "pk":
            continue
        kind = "unique " if index.unique else ""
        partial = " (partial)" if index.partial else ""
        bullets.append(f"- {kind}index `{index.name}` on {', '.join(index.columns)}{partial}")
    for fk in table.foreign_keys:
        bullets.append(f"- foreign key {fk.column} -> {fk.other_table}.{fk.other_column}")
    bullets += [f"- trigger `{t.name}`" for t in sorted(table.triggers, key=lambda t: t.name)]
    if bullets:
        lines += ["", *bullets]
    lines += ["", "```sql", table.schema.strip(), "```"]
    return lines
