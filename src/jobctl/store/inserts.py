"""Batched job inserts: the one way a job row comes into being.

Enqueue is the hot path of the API and the materializer creates a job per occurrence,
so a batch of N jobs costs one key lookup, one ``executemany`` and one counter upsert
per lane instead of N round trips, N ``RETURNING`` rows and N trigger runs.

Ids are assigned here, not by SQLite: the caller runs inside the single writer's
``BEGIN IMMEDIATE`` transaction, so the ids are one more than the highest id ever given
(``job_id_high``, raised by :func:`_write` once per batch; never ``max(id) + 1``, which goes
back when the newest jobs are deleted), and knowing them up front lets a batch skip
``RETURNING`` and read nothing back.

Idempotency: a spec whose key already names a job of the same owner (in the store, or
earlier in the same batch) is not inserted; it answers the existing id, or raises
:class:`KeyConflict` when the body differs (its fingerprint; a job stored with an older
fingerprint rule is compared by its row, :func:`jobctl.store.jobrow.same_body`). Keys
are scoped per owner (migration 0009): another user's job is never an answer. Counts:
``job_counts`` has no insert trigger (since migration 0005); :func:`insert_jobs` adds
one aggregated upsert per (queue, owner, bucket).
A job enqueued without a key gets a random one and an empty fingerprint: no later request
can name it, so there is nothing to compare it with.
"""

from __future__ import annotations

import os
import random
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import partial
from typing import NamedTuple

from jobctl.domain.models import Job, JobSpec, stored_spec
from jobctl.domain.slotted import compile_builder
from jobctl.domain.states import JobStatus
from jobctl.errors import InvalidInput, KeyConflict
from jobctl.store.base import Inserted
from jobctl.store.jobrow import DUE, OWNER, QUEUE, TAIL_AT, TextMemo, row_tail, same_body
from jobctl.store.queries import q
from jobctl.store.rows import whole_ms
from jobctl.store.sqltx import savepoint

#: SQLite's default limit on host parameters per statement is 32766; stay well below.
_LOOKUP_CHUNK = 500
_KEY_BITS = random.Random(os.urandom(32))


#: Errors that one row brings on itself (a CHECK constraint, a number SQLite cannot hold,
#: text that is not UTF-8), as opposed to the store failing (I/O, a full disk, a lock).
#: A batch that meets one is redone item by item, so the item fails alone.
ITEM_ERRORS: tuple[type[Exception], ...] = (
    sqlite3.IntegrityError,
    sqlite3.DataError,
    OverflowError,
    ValueError,
)


def refused_by_store(exc: Exception) -> InvalidInput:
    """What the caller of an item the store refused is told (a 422, never a 500)."""
    return InvalidInput(f"the store refused this job: {exc}")


class NewJob(NamedTuple):
    """One spec's fate: its job id, whether this call created it, its key and due flag."""

    id: int
    created: bool
    key: str
    due: bool


#: What a row needs besides its id: key, fingerprint, and the rest of the insert row
#: (:func:`jobctl.store.jobrow.row_tail`, positions named in :mod:`jobctl.store.jobrow`).
Prepared = tuple[str | None, str, tuple[object, ...]]


def insert_jobs(conn: sqlite3.Connection, specs: Sequence[JobSpec], now_ms: int) -> list[NewJob]:
    """Insert ``specs`` in order; see the module docstring for ids, keys and counts."""
    text = TextMemo()
    items: list[Prepared] = [
        (s.key, "" if s.key is None else s.fingerprint(), row_tail(s, now_ms, text)) for s in specs
    ]
    return insert_prepared(conn, items, now_ms)


def insert_prepared(
    conn: sqlite3.Connection, items: Sequence[Prepared], now_ms: int
) -> list[NewJob]:
    """Insert prepared rows in order: the core of :func:`insert_jobs`, for callers (the
    materializer) that build many rows from one template without a ``JobSpec`` each.
    A ``None`` key gets a fresh random one (and the fingerprint is ignored)."""
    keyed = [(tail[OWNER], key) for key, _, tail in items if key is not None]
    known = _known_keys(conn, keyed) if keyed else {}
    next_id = conn.execute(q("max_job_id")).fetchone()[0] + 1
    out: list[NewJob] = []
    rows: list[tuple[object, ...]] = []
    for asked, asked_fingerprint, tail in items:
        if asked is None:  # a fresh random key: nothing can ever be compared with it
            key, fingerprint, seen = auto_key(now_ms), "", None
        else:
            key, fingerprint = asked, asked_fingerprint
            seen = known.get((tail[OWNER], asked))
        if seen is not None:
            if not same_body(seen[1], fingerprint, partial(_row, conn, seen[0])):
                raise KeyConflict(
                    f"key {key!r} already names job {seen[0]} with a different body",
                    key=key,
                    job_id=seen[0],
                )
            out.append(NewJob(seen[0], False, key, seen[2]))
            continue
        due = bool(tail[DUE])
        rows.append((next_id, key, fingerprint, *tail))
        known[tail[OWNER], key] = (next_id, fingerprint, due)
        out.append(NewJob(next_id, True, key, due))
        next_id += 1
    if rows:
        _write(conn, rows)
    return out


def insert_fresh(conn: sqlite3.Connection, items: Sequence[Prepared], now_ms: int) -> list[NewJob]:
    """:func:`insert_prepared` for keys that are all but certainly new, such as a
    materializer's occurrence keys (the cursor naming them has not passed them yet).

    No lookup first: the unique key index is the check. Should a key exist after all (a
    client enqueued a job under it), the batch is rolled back to before it and redone the
    checked way, so the outcome is always :func:`insert_prepared`'s.
    """
    keys = [(tail[OWNER], key) for key, _, tail in items]
    if any(key is None for _, key in keys) or len(set(keys)) != len(keys):
        return insert_prepared(conn, items, now_ms)
    first = conn.execute(q("max_job_id")).fetchone()[0] + 1
    rows = [(first + i, key, fp, *tail) for i, (key, fp, tail) in enumerate(items)]
    try:
        with savepoint(conn, "fresh_keys"):
            _write(conn, rows)
    except sqlite3.IntegrityError as exc:
        if "jobs.key" not in str(exc):
            raise
        return insert_prepared(conn, items, now_ms)
    return [NewJob(r[0], True, r[1], bool(r[TAIL_AT + DUE])) for r in rows]


def _write(conn: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    """Insert full rows (id, key, fingerprint, then :func:`row_tail`), count them and
    raise the id mark: the one place job rows are inserted (a test holds it so)."""
    conn.executemany(q("insert_job_row"), rows)
    conn.execute(q("raise_job_id_high"), {"id": rows[-1][0]})  # ids ascend in a batch
    at = TAIL_AT
    count_inserted(conn, ((r[at + QUEUE], r[at + OWNER], r[at + DUE]) for r in rows))


def created_job(spec: JobSpec, new: NewJob, created_at: datetime) -> Job:
    """The job a fresh insert made, as reading it back would give it (times in whole ms)."""
    run_at = whole_ms(spec.run_at)
    scheduled_for = spec.scheduled_for
    if scheduled_for is not None:
        scheduled_for = whole_ms(scheduled_for)
    return _fresh_job(
        new.id, new.key, stored_spec(spec, run_at, new.key, scheduled_for), run_at, created_at
    )


def created(spec: JobSpec, new: NewJob, created_at: datetime) -> Inserted:
    """:func:`created_job`'s answer to the caller that created it (built the same way)."""
    return _inserted(created_job(spec, new, created_at))


_inserted = compile_builder(Inserted, "_inserted", "job", {"job": "job", "created": "True"})
#: ``_fresh_job(id, key, spec, run_at, created_at)``: a scheduled job never run, without
#: the frozen dataclass's ``__init__`` (its per-field ``object.__setattr__`` was a third
#: of the PostgreSQL committer's CPU per job of a 500-job batch, issue 15).
_fresh_job = compile_builder(
    Job,
    "_fresh_job",
    "id, key, spec, run_at, created_at",
    {
        "id": "id",
        "key": "key",
        "spec": "spec",
        "status": "SCHEDULED",
        "run_at": "run_at",
        "created_at": "created_at",
        "attempt": "0",
        "failures": "0",
        "generation": "0",
        "lease_owner": "None",
        "lease_until": "None",
        "finished_at": "None",
        "last_error": "None",
        "dead_reason": "None",
        "attempts": "()",
        "notified": "None",
    },
    {"SCHEDULED": JobStatus.SCHEDULED},
)


def count_inserted(
    conn: sqlite3.Connection, lanes: Iterable[tuple[object, object, object]]
) -> None:
    """Add new scheduled jobs, given as (queue, owner uid, due flag), to ``job_counts``."""
    counts = Counter((queue, owner, "due" if due else "scheduled") for queue, owner, due in lanes)
    conn.executemany(
        q("count_inserted"), [(qn, uid, bucket, n) for (qn, uid, bucket), n in counts.items()]
    )


def _known_keys(
    conn: sqlite3.Connection, keys: list[tuple[object, str]]
) -> dict[tuple[object, str], tuple[int, str, bool]]:
    """Existing jobs among ``keys`` (owner uid, key): those → (id, fingerprint, due flag)."""
    found: dict[tuple[object, str], tuple[int, str, bool]] = {}
    by_owner: dict[object, list[str]] = {}
    for owner, key in dict.fromkeys(keys):
        by_owner.setdefault(owner, []).append(key)
    for owner, unique in by_owner.items():
        for i in range(0, len(unique), _LOOKUP_CHUNK):
            chunk = unique[i : i + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            sql = q("jobs_by_keys").replace(":keys", marks).replace(":owner", "?")
            for job_id, key, fingerprint, due in conn.execute(sql, [owner, *chunk]):
                found[owner, key] = (job_id, fingerprint, bool(due))
    return found


def _row(conn: sqlite3.Connection, job_id: int) -> sqlite3.Row:
    row: sqlite3.Row = conn.execute(q("job_by_id"), {"id": job_id}).fetchone()
    return row


def auto_key(now_ms: int) -> str:
    """A unique key for a job enqueued without one.

    Time first, then 64 random bits: new keys land at the right edge of the unique key
    index instead of on a random page of it, which keeps a batch's commit small. The bits
    come from a generator seeded by the OS once (a system call per key showed in profiles);
    they only need to differ between jobs created in the same millisecond.
    """
    return f"job-{now_ms:012x}{_KEY_BITS.getrandbits(64):016x}"
