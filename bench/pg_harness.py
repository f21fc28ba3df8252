"""What ``bench_pg``'s workloads share: a fresh PostgreSQL database per run, real daemons on
it (each with its own socket, state directory and lease owner), the CPU that database's
server backends used, and the double-run and double-fire counts read from the database.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

import _common as C

#: The server every run uses (trust auth on this machine); each run gets its own database.
ADMIN_DSN = os.environ.get("JOBCTL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
#: Prefix of the databases this bench makes (and drops), apart from other sessions'.
PREFIX = "pgbench_"


@contextmanager
def database() -> Iterator[str]:
    """A fresh database (dropped afterwards, even if its daemons still hold connections)."""
    name = PREFIX + secrets.token_hex(4)
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield urlunsplit(urlsplit(ADMIN_DSN)._replace(path="/" + name))
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def query(dsn: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows of one read on ``dsn`` (the bench's own checks, not jobctl's queries)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, args).fetchall()


def doubles(dsn: str) -> tuple[int, int]:
    """(double runs, double fires) on the database: jobs with more than one attempt (every
    job of this bench succeeds on its first), and schedule occurrences made more than once."""
    ((runs,),) = query(
        dsn,
        "SELECT count(*) FROM (SELECT job_id FROM attempts GROUP BY job_id HAVING count(*) > 1) x",
    )
    ((fires,),) = query(
        dsn,
        "SELECT coalesce(sum(k - 1), 0) FROM (SELECT count(*) AS k FROM jobs "
        "WHERE schedule_id IS NOT NULL GROUP BY schedule_id, scheduled_for) x",
    )
    return int(runs), int(fires)


class PgDaemon:
    """A real ``jobctl daemon --db postgresql://…`` on temp paths; waits for ``event=ready``."""

    def __init__(self, workdir: Path, dsn: str, concurrency: int, *extra: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.dir = workdir
        self.sock = workdir / "jobctl.sock"
        self.log_path = workdir / "daemon.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        cmd = [
            C.JOBCTL_BIN,
            "daemon",
            "--db",
            dsn,
            "--state-dir",
            str(workdir / "state"),
            "--socket",
            str(self.sock),
            "--concurrency",
            str(concurrency),
            "--shutdown-grace",
            "1",
            "--kill-grace",
            "1",
            *extra,
        ]
        env = C.clean_env(workdir)
        self.proc = C.spawn(cmd, stdout=subprocess.DEVNULL, stderr=self._log, env=env)
        self.pid = self.proc.pid
        C.wait_ready(self.proc, self.log_path, self.stop)

    def http(self) -> C.UdsHttp:
        return C.UdsHttp(str(self.sock))

    def stop(self) -> None:
        C.stop_proc(self.proc)
        self._log.close()


def _proc_cpu(pid: int) -> float | None:
    try:
        return C.cpu_seconds(pid)
    except (OSError, ValueError, IndexError):
        return None


class PgCpu:
    """CPU seconds the server backends of one database used over a window.

    Samples ``pg_stat_activity`` for the database's backends every ``every`` seconds and
    keeps each backend's first and last CPU reading from /proc (a backend that connects
    during the window counts from zero; one that exits counts up to its last sample).
    The server's shared processes (WAL writer, checkpointer) are not counted: they serve
    every database on the machine.
    """

    def __init__(self, dsn: str, every: float = 0.2, exclude: frozenset[int] = frozenset()) -> None:
        self.dbname = urlsplit(dsn).path.lstrip("/")
        self.exclude = exclude  # the bench's own connections to the database
        self.every = every
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self._conn = psycopg.connect(ADMIN_DSN, autocommit=True)
        self._stop = threading.Event()
        self._sample(initial=True)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self, initial: bool = False) -> None:
        rows = self._conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.dbname,)
        ).fetchall()
        for (pid,) in rows:
            if pid in self.exclude:
                continue
            cpu = _proc_cpu(pid)
            if cpu is None:
                continue
            self.first.setdefault(pid, cpu if initial else 0.0)
            self.last[pid] = cpu

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def stop(self) -> float:
        """Stop sampling; the CPU seconds used since the start."""
        self._stop.set()
        self._thread.join()
        self._sample()
        self._conn.close()
        return sum(self.last[p] - self.first[p] for p in self.last)


def uptime() -> str:
    """The load averages (1, 5, 15 min), as ``uptime`` prints them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])
