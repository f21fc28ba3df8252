"""Retention in the SQLite store (a part of SqliteStore): pruning finished jobs.

Only final jobs are ever deleted (succeeded and cancelled after one age, dead after
another), with their attempts (foreign-key cascade), in small batches: each batch is a
short write that waits its turn in the group commit like any other, so pruning never
holds up dispatch. The caller deletes the attempt log files after the commit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from jobctl.store import rows
from jobctl.store.queries import q

if TYPE_CHECKING:
    from jobctl.store.sqlitedb import SqliteDb

PRUNE_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Pruned:
    jobs: dict[str, int]  # by status
    log_files: tuple[str, ...]

    @property
    def total(self) -> int:
        return sum(self.jobs.values())


class RetentionOps:
    def __init__(self, db: SqliteDb) -> None:
        self.db = db

    def prunable(self, cutoffs: Mapping[str, datetime]) -> dict[str, int]:
        """How many jobs of each final status finished before its cutoff (a dry run)."""

        def read(conn: sqlite3.Connection) -> dict[str, int]:
            return {
                status: conn.execute(
                    q("count_prunable"), {"status": status, "before": rows.to_ms(before)}
                ).fetchone()["n"]
                for status, before in cutoffs.items()
            }

        return self.db.read(read)

    def prune(self, cutoffs: Mapping[str, datetime], limit: int = PRUNE_BATCH) -> Pruned:
        """Delete up to ``limit`` finished jobs older than their status's cutoff."""
        return self.db.write(lambda conn: _prune_tx(conn, cutoffs, limit))

    def checkpoint(self) -> tuple[int, int]:
        """Fold the WAL back into the database and truncate it: keeps the files bounded."""
        return self.db.writer.outside_transaction(_checkpoint)


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
            # compare-and-set on the status read just now in this transaction (one writer):
            # it cannot miss, and a miss would only leave a job to the next batch
            conn.execute(q("delete_job"), {"id": job_id, "status": status})
        deleted[status] = len(ids)
        left -= len(ids)
        if left <= 0:
            break
    return Pruned(deleted, tuple(logs))


def _checkpoint(conn: sqlite3.Connection) -> tuple[int, int]:
    row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return int(row[1]), int(row[2])
