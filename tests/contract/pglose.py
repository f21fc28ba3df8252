"""Connections lost at chosen moments of a pipelined commit, for the PostgreSQL-only tests
of the pipe (test_pg_rawpipe) and of the group commit (test_pg_pipelined)."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

#: The advisory lock class of the queue locks (store/sql/postgres/queries.sql, lock_queues).
QUEUE_LOCKS = 1785684593


def swallow_answers(pipe: Any) -> None:
    """The connection lost with the server's answers in flight: once they arrive they are
    read off the socket here (libpq never sees them), then the socket is shut, so the pipe
    reads the end of the stream. (Shutting it alone would not do: what the kernel already
    holds stays readable.)"""
    with socket.socket(fileno=os.dup(pipe._pg.socket)) as s:
        select.select([s], [], [], 5)
        s.setblocking(False)
        for _ in range(3):  # everything comes at the sync, in one flush; a margin
            with contextlib.suppress(BlockingIOError):
                while s.recv(65536):
                    pass
            time.sleep(0.02)
        s.shutdown(socket.SHUT_RDWR)


def wait_for(predicate: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {predicate}"
        time.sleep(0.01)


def stored_keys(admin: psycopg.Connection[Any], schema: str, key: str) -> int:
    """How many jobs of ``schema`` carry ``key`` (committed ones: another session's view)."""
    query = sql.SQL("SELECT count(*) FROM {}.jobs WHERE key = %s").format(sql.Identifier(schema))
    row = admin.execute(query, (key,)).fetchone()
    return int(row[0]) if row else 0


def stored_jobs(admin: psycopg.Connection[Any], schema: str) -> int:
    """How many jobs ``schema`` holds (committed ones)."""
    query = sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(schema))
    row = admin.execute(query).fetchone()
    return int(row[0]) if row else 0


def hold_queue(admin: psycopg.Connection[Any], schema: str, queue: str) -> None:
    """Take ``queue``'s lock of ``schema`` exclusively in ``admin``'s session: an enqueue
    to it waits (in its transaction, before its ``COMMIT`` runs) until :func:`free_queue`."""
    admin.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (QUEUE_LOCKS, f"{schema}.{queue}"))


def free_queue(admin: psycopg.Connection[Any], schema: str, queue: str) -> None:
    admin.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (QUEUE_LOCKS, f"{schema}.{queue}"))


def waits_for_a_lock(admin: psycopg.Connection[Any], pid: int) -> bool:
    """Whether server process ``pid`` waits for an advisory lock (:func:`hold_queue`'s)."""
    row = admin.execute(
        "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'advisory' AND NOT granted",
        (pid,),
    ).fetchone()
    return bool(row and row[0])
