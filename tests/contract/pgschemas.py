"""Migrated PostgreSQL schemas for the contract suite, reused from one test to the next.

Migrating a fresh schema (and dropping it afterwards) is 0.2-0.5 s of the server's
work, about all of a short contract test's time on PostgreSQL. So each process keeps
the schemas it made: a test takes a pristine one (made and migrated by
:class:`~jobctl.store.pg.store.PostgresStore` itself the first time), and gives it back
after its store is closed, when it is put back as the migration left it, in one
transaction:

- every table emptied (``DELETE``) and the rows the migrations left (the
  ``schema_migrations`` list) put back as they were, triggers off (``session_replication_role
  = replica``), so nothing counts them twice;
- every sequence set back to where it was (job ids start at 1 again, as in a fresh schema).

A test that changed a definition (a table, column, index, constraint, trigger, function,
type or sequence of the schema) does not hand it on: the schema is compared with its
pristine fingerprint first and dropped if they differ, as it is when the reset cannot
take its locks in time (a connection left open by the test). Whatever a test does to a
schema, the next one starts on what a fresh migration makes: the same definitions, no
rows but the migrations', sequences unused. Schemas still kept when the process ends are
dropped then (:func:`drop_all`).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: Every catalog row of the schema's definitions (tables, columns, defaults, indexes,
#: constraints, triggers, functions, types, sequences, rules) by its id and the
#: transaction that last wrote it: any change of a definition writes or removes one
#: (a statistics update by VACUUM or ANALYZE writes in place and changes nothing here).
_FINGERPRINT = """
SELECT md5(string_agg(line, ',' ORDER BY line)) FROM (
    SELECT 'class ' || c.oid || ' ' || c.xmin AS line
    FROM pg_class c WHERE c.relnamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT 'column ' || a.attrelid || '.' || a.attnum || ' ' || a.xmin
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    WHERE c.relnamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT 'default ' || d.oid || ' ' || d.xmin
    FROM pg_attrdef d JOIN pg_class c ON c.oid = d.adrelid
    WHERE c.relnamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT 'index ' || i.indexrelid || ' ' || i.xmin
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
    WHERE c.relnamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT 'constraint ' || o.oid || ' ' || o.xmin
    FROM pg_constraint o WHERE o.connamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT 'trigger ' || t.oid || ' ' || t.xmin
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE c.relnamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT 'rule ' || r.oid || ' ' || r.xmin
    FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
    WHERE c.relnamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT 'function ' || p.oid || ' ' || p.xmin
    FROM pg_proc p WHERE p.pronamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT 'type ' || t.oid || ' ' || t.xmin
    FROM pg_type t WHERE t.typnamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT 'sequence ' || s.seqrelid || ' ' || s.xmin
    FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
    WHERE c.relnamespace = %(ns)s::regnamespace
) AS definitions
"""
_TABLES = (
    "SELECT c.relname FROM pg_class c WHERE c.relnamespace = %(ns)s::regnamespace"
    " AND c.relkind IN ('r', 'p') ORDER BY 1"
)
_SEQUENCES = (
    "SELECT sequencename, start_value, last_value FROM pg_sequences WHERE schemaname = %(ns)s"
)
#: Seconds the reset waits for a lock before it gives the schema up (dropped instead).
LOCK_TIMEOUT = "5s"


@dataclass(frozen=True)
class Pristine:
    """What a schema is right after its migrations: its tables, the rows of the
    non-empty ones and its sequences' values."""

    tables: tuple[str, ...]
    rows: dict[str, list[tuple[Any, ...]]]
    sequences: dict[str, tuple[int, int | None]]  # name: start, last value (None: unused)


class Schemas:
    """The migrated schemas of one process on the server at ``dsn``."""

    def __init__(self, dsn: str, migrate: Callable[[str], None]) -> None:
        """``migrate(schema)`` brings a new, empty schema up to date (opens and closes a
        store on it)."""
        self.dsn = dsn
        self._migrate = migrate
        self._free: list[str] = []
        #: Each schema made, and its definitions' fingerprint when it was new.
        self._made: dict[str, str] = {}
        self._pristine: Pristine | None = None

    def take(self) -> str:
        """A schema as its migrations left it, for one test."""
        if self._free:
            return self._free.pop()
        schema = "jobctl_t_" + secrets.token_hex(6)
        self._sql(f"CREATE SCHEMA {schema}")
        self._made[schema] = ""
        self._migrate(schema)
        if self._pristine is None:
            self._pristine = self._read(schema)
        self._made[schema] = self._sql(_FINGERPRINT, {"ns": schema})[0][0]
        return schema

    def give_back(self, schema: str) -> None:
        """Put ``schema`` back as :meth:`take` found it for the next test, or drop it if
        the test changed its definitions (or the reset cannot get its locks)."""
        import psycopg

        assert self._pristine is not None
        try:
            with psycopg.connect(self.dsn, connect_timeout=5) as conn:
                if _fingerprint(conn, schema) == self._made[schema]:
                    _reset(conn, schema, self._pristine)
                    self._free.append(schema)
                    return
        except psycopg.errors.LockNotAvailable:
            pass
        self.drop(schema)

    def drop(self, schema: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())
        self._made.pop(schema, None)

    def drop_all(self) -> None:
        """Drop every schema this process made (at the end of the session)."""
        for schema in sorted(self._made):
            self.drop(schema)
        self._free.clear()

    def _read(self, schema: str) -> Pristine:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            ns = {"ns": schema}
            tables = tuple(r[0] for r in conn.execute(_TABLES.encode(), ns))
            rows = {}
            for table in tables:
                found = conn.execute(f"SELECT * FROM {schema}.{table}".encode()).fetchall()
                if found:
                    rows[table] = found
            sequences = {r[0]: (r[1], r[2]) for r in conn.execute(_SEQUENCES.encode(), ns)}
            return Pristine(tables, rows, sequences)

    def _sql(self, text: str, params: dict[str, str] | None = None) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(text.encode(), params)
            return cur.fetchall() if cur.description else []


def _fingerprint(conn: Any, schema: str) -> str:
    row = conn.execute(_FINGERPRINT.encode(), {"ns": schema}).fetchone()
    return str(row[0])


def _reset(conn: Any, schema: str, pristine: Pristine) -> None:
    """Empty every table, put the pristine rows back and set the sequences back, in the
    transaction ``conn`` is in (committed when its ``with`` block ends).

    ``DELETE``, not ``TRUNCATE``: a test leaves a few rows, and ``TRUNCATE`` makes new
    files for every table and index (0.2-0.4 s). The commit need not wait for the WAL's
    flush: a server that crashes fails the test that follows anyway."""
    conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'".encode())
    conn.execute(b"SET LOCAL session_replication_role = replica")  # no triggers, no FKs
    conn.execute(b"SET LOCAL synchronous_commit = off")
    for table in pristine.tables:
        conn.execute(f"DELETE FROM {schema}.{table}".encode())
    for table, rows in pristine.rows.items():
        marks = ", ".join(["%s"] * len(rows[0]))
        with conn.cursor() as cur:
            sql = f"INSERT INTO {schema}.{table} OVERRIDING SYSTEM VALUE VALUES ({marks})"
            cur.executemany(sql.encode(), rows)
    for name, (start, last) in pristine.sequences.items():
        # never used (``last`` None): not called, so the next nextval() is its start
        value, called = (start, False) if last is None else (last, True)
        conn.execute("SELECT setval(%s, %s, %s)", (f"{schema}.{name}", value, called))


def reused(schemas: Schemas) -> Iterator[str]:
    """A pristine schema for one test (a fixture's body), given back after it."""
    schema = schemas.take()
    try:
        yield schema
    finally:
        schemas.give_back(schema)
