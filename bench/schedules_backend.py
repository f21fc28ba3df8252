"""Where ``bench_schedules`` keeps its schedules: SQLite files in its temp directory (the
default), or PostgreSQL databases of its own on the server of ``--db postgresql://…``.

The workloads are written once against :class:`Backend`: ``store`` opens a store of the
named database, ``copy`` gives a daemon its own copy of one (a file copy on SQLite,
``CREATE DATABASE … TEMPLATE`` on PostgreSQL), ``daemon_db`` is what ``jobctl daemon
--db`` is given. PostgreSQL databases are named ``jobctl_bench_sched`` (the in-process
one) and ``jobctl_bench_sched_<name>``, dropped when the bench ends (``close``), and
dropped first if an earlier run left them behind.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from schedules_specs import copy_db

#: Every database this bench makes on a PostgreSQL server starts with this.
PG_PREFIX = "jobctl_bench_sched"


def is_url(db: str | None) -> bool:
    return db is not None and db.startswith(("postgresql://", "postgres://"))


class Backend:
    """SQLite (``admin_url`` None) or the PostgreSQL server of ``admin_url``."""

    def __init__(self, tmp: Path, admin_url: str | None = None) -> None:
        self.tmp = tmp
        self.admin_url = admin_url
        self.made: list[str] = []

    @property
    def name(self) -> str:
        return "sqlite" if self.admin_url is None else "postgresql"

    @property
    def store_class(self) -> str:
        return "SqliteStore" if self.admin_url is None else "PostgresStore"

    def _dbname(self, name: str) -> str:
        return PG_PREFIX if name == "sched" else f"{PG_PREFIX}_{name}"

    def _url(self, name: str) -> str:
        assert self.admin_url is not None
        parts = urlsplit(self.admin_url)
        return urlunsplit(parts._replace(path="/" + self._dbname(name)))

    def _admin(self, *sql: str) -> None:
        import psycopg

        assert self.admin_url is not None
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            for stmt in sql:
                conn.execute(stmt)  # names made here (PG_PREFIX), never input

    def fresh(self, name: str, template: str | None = None) -> None:
        """An empty database ``name`` (or a copy of ``template``), made by the bench."""
        if self.admin_url is None:
            return
        db = self._dbname(name)
        copy = f" TEMPLATE {self._dbname(template)}" if template else ""
        self._admin(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)", f"CREATE DATABASE {db}{copy}")
        if db not in self.made:
            self.made.append(db)

    def store(self, name: str, clock: Any) -> Any:
        """A store on database ``name`` (made empty by :meth:`fresh` first on PostgreSQL)."""
        if self.admin_url is None:
            from jobctl.store.sqlite import SqliteStore

            return SqliteStore(self.tmp / f"{name}.db", clock)
        from jobctl.store.pg.store import PostgresStore

        return PostgresStore(self._url(name), clock, random.Random(1))

    def copy(self, src: str, dst: str) -> None:
        """Database ``dst`` as a copy of the closed database ``src``."""
        if self.admin_url is None:
            copy_db(self.tmp / f"{src}.db", self.tmp / f"{dst}.db")
        else:
            self.fresh(dst, template=src)

    def daemon_db(self, name: str) -> Path | str:
        """``jobctl daemon --db`` of database ``name``."""
        return self.tmp / f"{name}.db" if self.admin_url is None else self._url(name)

    def size_mb(self, name: str) -> float:
        if self.admin_url is None:
            return (self.tmp / f"{name}.db").stat().st_size / 1e6
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            row = conn.execute("SELECT pg_database_size(%s)", (self._dbname(name),)).fetchone()
        return float(row[0]) / 1e6 if row else float("nan")

    def server(self) -> str | None:
        """The PostgreSQL server's version and the settings that move these figures
        (autovacuum: whether the planner has statistics right after an import)."""
        if self.admin_url is None:
            return None
        import psycopg

        shown = ("server_version", "shared_buffers", "synchronous_commit", "fsync", "autovacuum")
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            got = [
                f"{k} {conn.execute(f'SHOW {k}').fetchone()[0]}"  # type: ignore[index]
                for k in shown
            ]
        return ", ".join(got)

    def close(self) -> None:
        """Drop every database the bench made (connections still open are ended)."""
        if self.admin_url is not None and self.made:
            self._admin(*(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)" for db in self.made))
            self.made.clear()
