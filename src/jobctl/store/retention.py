"""Retention in the SQLite store (mixed into SqliteStore): pruning finished jobs.

Only final jobs are ever deleted (succeeded and cancelled after one age, dead after
another), with their attempts (foreign-key cascade), in small batches: each batch is a
short write that waits its turn in the group commit like any other, so pruning never
holds up dispatch. The caller deletes the attempt log files after the commit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from jobctl.domain.clock import Clock
from jobctl.store import rows
from jobctl.store.queries import q
from jobctl.store.writer import Writer

T = TypeVar("T")
PRUNE_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Pruned:
    jobs: dict[str, int]  # by status
    log_files: tuple[str, ...]

    @property
    def total(self) -> int:
        return sum(self.jobs.values())


class _Host(Protocol):
    clock: Clock
    _writer: Writer

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...


class RetentionOps:
    def prunable(self: _Host, cutoffs: Mapping[str, datetime]) -> dict[str, int]:
        """How many jobs of each final status finished before its cutoff (a dry run)."""

        def read(conn: sqlite3.Connection) -> dict[str, int]:
            return {
                status: conn.execute(
                    q("count_prunable"), {"status": status, "before": rows.to_ms(before)}
                ).fetchone()["n"]
                for status, before in cutoffs.items()
            }

        return self._read(read)

    def prune(self: _Host, cutoffs: Mapping[str, datetime], limit: int = PRUNE_BATCH) -> Pruned:
        """Delete up to ``limit`` finished jobs older than their status's cutoff."""
        return self._writer.call(lambda conn: _prune_tx(conn, cutoffs, limit))

    def checkpoint(self: _Host) -> tuple[int, int]:
        """Fold the WAL back into the database and truncate it: keeps the files bounded."""
        return self._writer.outside_transaction(_checkpoint)


def _prune_tx(conn: sqlite3.Connection, cutoffs: Mapping[str, datetime], limit: int) -> Pruned:
    deleted: dict[str, int] = {}
    logs: list[str] = []
    left = limit
    for status, before in cutoffs.items():
        if status not in ("succeeded", "cancelled", "dead"):
            raise ValueError(f"only final jobs are pruned, not {status!r}")
        params = {"status": status, "before": rows.to_ms(before), "limit": left}
        ids = [r["id"] for r in conn.execute(q("prune_candidates"), params)]
        for job_id in ids:
            logs += [r["log_path"] for r in conn.execute(q("attempt_logs_of"), {"id": job_id})]
            conn.execute(q("delete_job"), {"id": job_id, "status": status})
        deleted[status] = len(ids)
        left -= len(ids)
        if left <= 0:
            break
    return Pruned(deleted, tuple(logs))


def _checkpoint(conn: sqlite3.Connection) -> tuple[int, int]:
    row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return int(row[1]), int(row[2])
