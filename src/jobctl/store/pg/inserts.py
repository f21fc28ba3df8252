"""Batched job inserts on PostgreSQL: one key lookup, one id fetch and one ``COPY`` for a
whole batch (a pipelined ``executemany`` of 500 rows took about a second under load), and
for all the groups of one write together when none has a key (:func:`_together`).

Idempotency and the outcome per group are :mod:`jobctl.store.inserts`'s: a known key of
the same owner answers the stored job, or :class:`KeyConflict` when the body differs
(:func:`jobctl.store.jobrow.same_body`). Ids come from a sequence, never reused. Two
daemons racing for one new key meet the unique index: the loser's group is redone the
checked way and answers the winner's job.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache, partial
from typing import Any

import orjson
import psycopg

from jobctl.domain.models import JobSpec
from jobctl.domain.quota import refuse_over
from jobctl.errors import JobctlError, KeyConflict
from jobctl.store import workerq
from jobctl.store.base import Inserted
from jobctl.store.inserts import (
    NewJob,
    Prepared,
    auto_key,
    created,
    refused_by_store,
)
from jobctl.store.jobrow import DUE, OWNER, TextMemo, job_from_row, row_tail, same_body
from jobctl.store.pg import lockorder
from jobctl.store.pg.db import PgConn, PgDb
from jobctl.store.pg.queued import over_queued_quota, queued_limits, scheduled
from jobctl.store.pg.rawpipe import Pipe, native
from jobctl.store.rows import RowLike, ms_to_dt

#: Jobs inserted at most by one pipelined ``INSERT`` (:func:`keyless_tx`); more go by
#: ``COPY`` (a statement's parameters are bounded: 65,535).
PIPELINED_MAX = 256
_SAVEPOINT = "jobctl_keyless"
#: Errors one row brings on itself (a CHECK, a number out of range, bad text): the group
#: holding it fails alone, as on SQLite.
ITEM_ERRORS: tuple[type[Exception], ...] = (
    psycopg.errors.IntegrityError,
    psycopg.errors.DataError,
    OverflowError,
    ValueError,
)


def insert_groups_tx(
    db: PgDb, conn: PgConn, groups: Sequence[Sequence[JobSpec]]
) -> list[list[Inserted] | JobctlError]:
    """Each group's outcome as if inserted alone, in order (see the module docstring)."""
    specs = [s for g in groups for s in g]
    if 0 < len(specs) <= PIPELINED_MAX and all(s.key is None and s.payload is None for s in specs):
        out = _pipelined(db, conn, groups, specs)
        if out is not None:
            return out
        return _checked(db, conn, groups, together=False)  # a row was refused: group by group
    return _checked(db, conn, groups, together=True)


def _checked(
    db: PgDb, conn: PgConn, groups: Sequence[Sequence[JobSpec]], together: bool
) -> list[list[Inserted] | JobctlError]:
    from jobctl.store.pg.schedconn import PgSchedConn  # it imports this module
    from jobctl.store.workerq import check_kinds

    refused = check_kinds(PgSchedConn(db, conn), groups) | over_queued_quota(db, conn, groups)
    ok = [g for i, g in enumerate(groups) if i not in refused]
    joint = _together(db, conn, ok) if together else None
    if joint is not None:
        it = iter(joint)
        return [refused[i] if i in refused else next(it) for i in range(len(groups))]
    out: list[list[Inserted] | JobctlError] = []
    for i, group in enumerate(groups):
        error = refused.get(i)
        out.append(error if error is not None else _group(db, conn, group))
    return out


def _pipelined(
    db: PgDb, conn: PgConn, groups: Sequence[Sequence[JobSpec]], specs: Sequence[JobSpec]
) -> list[list[Inserted] | JobctlError] | None:
    """Keyless groups (no payload job: nothing to mark as a worker queue) in two round
    trips: the owners' counts, the ids and the worker queues read together, then the
    savepoint, one multi-row ``INSERT`` and the release; None if a row was refused (its
    savepoint rolled back: the caller goes group by group).

    Why: a group commit of single-job enqueues carries a few jobs, and each round trip
    waits for the server process to be scheduled on a busy host; checked one by one they
    were six round trips (issue 15's benchmark). Ids of refused groups are left unused
    (the sequence has gaps anyway: ids are never reused, not dense). The group commit's
    pipelined path (:mod:`jobctl.store.pg.pipelined`) sends the same plan without the
    savepoint, with its ``BEGIN`` and ``COMMIT``."""
    plan = KeylessPlan.make(db, groups)
    if plan is None:
        return None
    sent = False
    try:
        with conn.pipeline():
            plan.reads(conn)
            out, params = plan.answers()  # the reads' fetch: round trip 1
            if params:
                conn.execute(f"SAVEPOINT {_SAVEPOINT}")
                sent = True
                insert_rows(db, conn, params)
                conn.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
    except psycopg.OperationalError:
        raise
    except ITEM_ERRORS:
        if not sent:
            raise
        conn.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
        conn.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
        return None
    return out


class KeylessPlan:
    """The insert of groups without payload jobs, sent two ways.

    In one step (the group commit's pipelined transaction, :meth:`queue` then
    :meth:`answer`): the queues' locks, then one ``INSERT`` (``insert_keyless``) that
    checks the worker queues and the owners' ``queued`` quota itself and takes its ids
    from the sequence; a group it would refuse makes the statement fail, and the group
    commit goes the checked way. Jobs with their callers' keys too (``keyed``): a key
    already stored fails the statement on the unique index, and the checked way answers
    the stored job or the conflict. Why: the group commit is then one round trip (issue
    15's benchmark; a refusal or a repeated key, rarer, costs that one more).

    In two steps (the checked way, :func:`_pipelined`): :meth:`reads` queues the owners'
    counts, the ids, the queues' locks and the worker queues' names; :meth:`answers`
    fetches them (one round trip for all) and gives each group's outcome, refusals
    included, and the rows to insert."""

    def __init__(self, db: PgDb, groups: Sequence[Sequence[JobSpec]], now_ms: int) -> None:
        self._db = db
        self._groups = groups
        self.made_ms = now_ms  # its rows' creation time (also store.pg.resend's mark)
        self._limited = queued_limits(db, groups)
        text = TextMemo()
        self._tails = [row_tail(s, now_ms, text) for g in groups for s in g]  # ITEM_ERRORS
        self._counts: dict[int, psycopg.Cursor[Any]] = {}
        self._ids: psycopg.Cursor[Any] | None = None
        self._workers: psycopg.Cursor[Any] | None = None
        self._locks: psycopg.Cursor[Any] | None = None
        self._keys: list[str] = []
        self._pipe: Pipe | None = None
        self._inserted = 0  # the INSERT's answer in the pipe

    @classmethod
    def make(
        cls, db: PgDb, groups: Sequence[Sequence[JobSpec]], keyed: bool = False
    ) -> KeylessPlan | None:
        """The plan of ``groups``, or None when it does not apply (a payload job, a key
        unless ``keyed``, too many jobs for one statement, or a row its values already
        refuse). ``keyed``: jobs may carry their callers' keys (the one-step way only: a
        key already stored makes its ``INSERT`` fail, see :meth:`queue`)."""
        specs = [s for g in groups for s in g]
        if not 0 < len(specs) <= PIPELINED_MAX:
            return None
        if any((s.key is not None and not keyed) or s.payload is not None for s in specs):
            return None
        try:
            return cls(db, groups, db.now_ms())
        except ITEM_ERRORS:
            return None

    def queue(self, pipe: Pipe) -> None:
        """Queue the queues' locks and the ``INSERT`` (in a pipeline: nothing is fetched
        here; the locks are a statement of their own, so that the ``INSERT``'s snapshot,
        taken after them, sees every worker queue marked by a writer that held one: the
        shared locks of :func:`jobctl.store.workerq.lock`)."""
        specs = [s for g in self._groups for s in g]
        queues = orjson.dumps(sorted({s.queue for s in specs})).decode()
        pipe.execute(native(self._db.q("lock_queues_shared"), ("names",)), (queues,))
        self._keys = [auto_key(self.made_ms) if s.key is None else s.key for s in specs]
        adding = Counter(s.owner_uid for s in specs if s.owner_uid in self._limited)
        rooms = [{"uid": uid, "room": self._limited[uid] - n} for uid, n in adding.items()]
        params: list[object] = [queues, orjson.dumps(rooms).decode()]
        for spec, key, tail in zip(specs, self._keys, self._tails, strict=True):
            params += (key, "" if spec.key is None else spec.fingerprint(), *tail)
        text = numbered_rows(self._db.q("insert_keyless"), len(self._tails))
        self._pipe, self._inserted = pipe, pipe.execute(text, params)

    def answer(self) -> list[list[Inserted] | JobctlError]:
        """Each group's outcome, from the ``INSERT``'s rows (after the round trip)."""
        assert self._pipe is not None  # queue() came first
        ids = {
            (int(u or 0), bytes(k or b"").decode()): int(i or 0)
            for i, u, k in self._pipe.rows(self._inserted)
        }
        keys, tails = iter(self._keys), iter(self._tails)
        created_at = ms_to_dt(self.made_ms)
        out: list[list[Inserted] | JobctlError] = []
        for group in self._groups:
            made = []
            for spec in group:
                key, tail = next(keys), next(tails)
                new = NewJob(ids[spec.owner_uid, key], True, key, bool(tail[DUE]))
                made.append(created(spec, new, created_at))
            out.append(made)
        return out

    def reads(self, conn: PgConn) -> None:
        """Queue the reads (in a pipeline: nothing is fetched here)."""
        db = self._db
        self._counts = {u: conn.execute(db.q("owner_counts"), {"uid": u}) for u in self._limited}
        self._ids = conn.execute(db.q("next_job_ids"), {"n": len(self._tails)})
        kinds = ((s.queue, False) for g in self._groups for s in g)
        # before the names are read (workerq), checked once fetched (lockorder)
        self._locks = lockorder.advisory(db, conn, workerq.lock_modes(kinds))
        self._workers = conn.execute(db.q("worker_queues"))

    def answers(self) -> tuple[list[list[Inserted] | JobctlError], list[object]]:
        """Each group's outcome, and the values of the rows to insert (empty: none)."""
        assert self._ids is not None and self._workers is not None  # reads() came first
        assert self._locks is not None
        lockorder.check(self._locks)  # OutOfOrder: the group commit runs it alone
        ids = iter([r["id"] for r in self._ids])
        have = {uid: scheduled(cur) for uid, cur in self._counts.items()}
        known = {r["name"] for r in self._workers}
        refused = workerq.refuse_for_workers(self._groups, known)
        refused |= refuse_over(self._groups, self._limited, have)
        out: list[list[Inserted] | JobctlError] = []
        params: list[object] = []
        tails = iter(self._tails)
        for i, group in enumerate(self._groups):
            mine = [(spec, next(tails)) for spec in group]
            if i in refused:
                out.append(refused[i])
                continue
            out.append([_fresh(s, t, next(ids), self.made_ms, params) for s, t in mine])
        return out, params


def _fresh(
    spec: JobSpec, tail: tuple[object, ...], job_id: int, now_ms: int, params: list[object]
) -> Inserted:
    """``spec``'s answer, its row's values added to ``params``."""
    key = _auto_key(now_ms, job_id)
    params += (job_id, key, "", *tail)
    return created(spec, NewJob(job_id, True, key, bool(tail[DUE])), ms_to_dt(now_ms))


def _together(
    db: PgDb, conn: PgConn, groups: Sequence[Sequence[JobSpec]]
) -> list[list[Inserted]] | None:
    """Several groups without keys in one savepoint, one id fetch and one ``INSERT`` (or
    ``COPY`` when large); None when that does not apply or a row was refused (the caller
    then goes group by group, so the bad group fails alone and the others are stored).

    Why: single-job enqueues from concurrent clients arrive as many one-job groups in one
    write; a savepoint, an id fetch and a ``COPY`` each cost about five round trips per
    job, and on a busy host every round trip waits for the server process to be scheduled
    (issue 15's benchmark). Without keys no group can meet a stored job, so inserting them
    together gives each group what inserting it alone would."""
    specs = [s for g in groups for s in g]
    if len(groups) < 2 or any(s.key is not None for s in specs):
        return None
    try:
        if len(specs) <= PIPELINED_MAX:
            flat = keyless_tx(db, conn, specs)
        else:
            with conn.transaction():
                flat = insert_tx(db, conn, specs)
    except (JobctlError, psycopg.errors.UniqueViolation):
        return None
    except ITEM_ERRORS:
        return None
    out, start = [], 0
    for g in groups:
        out.append(flat[start : start + len(g)])
        start += len(g)
    return out


def keyless_tx(db: PgDb, conn: PgConn, specs: Sequence[JobSpec]) -> list[Inserted]:
    """Jobs without keys, in a savepoint of their own, in two round trips: the savepoint
    and the id fetch, then one multi-row ``INSERT`` and the release (pipelined; ``COPY``
    cannot be). On any failure the savepoint is rolled back and the error raised.

    Why: a group commit of single-job enqueues carries a few jobs; its savepoint, id fetch,
    ``COPY`` (two round trips) and release were five round trips, each waiting for the
    server process to be scheduled on a busy host (issue 15's benchmark)."""
    now_ms = db.now_ms()
    created_at = ms_to_dt(now_ms)
    text = TextMemo()
    tails = [row_tail(s, now_ms, text) for s in specs]
    try:
        with conn.pipeline():
            conn.execute(f"SAVEPOINT {_SAVEPOINT}")
            ids = [r["id"] for r in conn.execute(db.q("next_job_ids"), {"n": len(specs)})]
            params = [
                v
                for i, t in zip(ids, tails, strict=True)
                for v in (i, _auto_key(now_ms, i), "", *t)
            ]
            insert_rows(db, conn, params)
            conn.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
    except psycopg.OperationalError:
        raise  # the connection: the whole transaction is retried
    except BaseException:
        conn.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
        conn.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
        raise
    return [
        created(s, NewJob(i, True, _auto_key(now_ms, i), bool(t[DUE])), created_at)
        for s, i, t in zip(specs, ids, tails, strict=True)
    ]


def insert_rows(db: PgDb, conn: PgConn, params: Sequence[object]) -> None:
    """``insert_job_values`` with its row repeated for ``params`` (a row's values each).

    Sent with numbered placeholders (a raw cursor), their text made once per row count:
    psycopg converts a query's ``%s`` on every call when it has more than 50 parameters,
    which took a tenth of the group commit's time (issue 15's benchmark)."""
    text = db.q("insert_job_values")
    width = text.count("%s")
    psycopg.RawCursor(conn).execute(numbered_rows(text, len(params) // width), params)


@lru_cache(maxsize=2 * PIPELINED_MAX)
def numbered_rows(text: str, n: int) -> str:
    """``text``, one ``INSERT`` with one row after ``VALUES`` (and maybe ``%s`` before it
    and a ``RETURNING`` after it), with that row ``n`` times and every ``%s`` numbered
    in order: ``$1``, ``$2``…"""
    head, rest = _VALUES.split(text, 1)
    row, *tail = _RETURNING.split(rest, 1)
    whole = f"{head} VALUES {', '.join([row.strip()] * n)}" + "".join(
        f" RETURNING {t}" for t in tail
    )
    parts = whole.split("%s")
    return "".join(f"{p}${i + 1}" for i, p in enumerate(parts[:-1])) + parts[-1]


_VALUES = re.compile(r"\sVALUES\s")
_RETURNING = re.compile(r"\sRETURNING\s")


def _group(db: PgDb, conn: PgConn, specs: Sequence[JobSpec]) -> list[Inserted] | JobctlError:
    try:
        with conn.transaction():  # a savepoint: a refused group leaves nothing behind
            return insert_tx(db, conn, specs)
    except JobctlError as exc:
        return exc
    except psycopg.errors.UniqueViolation:  # another daemon took a key meanwhile
        return _group(db, conn, specs)
    except ITEM_ERRORS as exc:
        return refused_by_store(exc)


def insert_tx(db: PgDb, conn: PgConn, specs: Sequence[JobSpec]) -> list[Inserted]:
    now_ms = db.now_ms()
    created_at = ms_to_dt(now_ms)
    text = TextMemo()
    items = [
        (s.key, "" if s.key is None else s.fingerprint(), row_tail(s, now_ms, text)) for s in specs
    ]
    out = []
    for spec, new in zip(specs, insert_prepared(db, conn, items, now_ms), strict=True):
        if new.created:
            out.append(created(spec, new, created_at))
        else:
            row = conn.execute(db.q("job_by_id"), {"id": new.id}).fetchone()
            out.append(Inserted(job_from_row(_row(row)), False))
    return out


def insert_prepared(db: PgDb, conn: PgConn, items: Sequence[Prepared], now_ms: int) -> list[NewJob]:
    """Prepared rows (key, fingerprint, :func:`row_tail`), each key looked up first: a
    known key answers its job (or :class:`KeyConflict`), as SQLite's ``insert_prepared``."""
    known = _known_keys(db, conn, [(t[OWNER], k) for k, _, t in items if k is not None])
    ids = next_job_ids(db, conn, len(items))
    out: list[NewJob] = []
    rows: list[tuple[object, ...]] = []
    auto = f"job-{now_ms:012x}"  # _auto_key's head
    keyed = bool(known) or any(k is not None for k, _, _ in items)
    for (asked, fingerprint, tail), job_id in zip(items, ids, strict=True):
        due = bool(tail[DUE])
        if asked is None:  # unique by its id: remembered only for a key asked later
            key = f"{auto}{job_id:016x}"
            rows.append((job_id, key, "", *tail, "scheduled"))
            if keyed:
                known[tail[OWNER], key] = (job_id, "", due)
            out.append(NewJob(job_id, True, key, due))
            continue
        key = asked
        seen = known.get((tail[OWNER], key))
        if seen is not None:
            if not same_body(seen[1], fingerprint, partial(_read_row, db, conn, seen[0])):
                raise KeyConflict(
                    f"key {key!r} already names job {seen[0]} with a different body",
                    key=key,
                    job_id=seen[0],
                )
            out.append(NewJob(seen[0], False, key, seen[2]))
            continue
        rows.append((job_id, key, fingerprint, *tail, "scheduled"))
        known[tail[OWNER], key] = (job_id, fingerprint, due)
        out.append(NewJob(job_id, True, key, due))
    if rows:
        with conn.cursor() as cur, cur.copy(db.q("insert_job_row")) as copy:
            for row in rows:
                copy.write_row(row)
    return out


def next_job_ids(db: PgDb, conn: PgConn, n: int) -> list[int]:
    """``n`` new job ids from the sequence, in the order taken, read as one row of text
    (``next_job_ids_text``: 500 rows through psycopg cost ~1.5 µs each)."""
    row = conn.execute(db.q("next_job_ids_text"), {"n": n}).fetchone()
    text = None if row is None else row["ids"]
    return [int(i) for i in text.split(",")] if text else []


def _known_keys(
    db: PgDb, conn: PgConn, keys: list[tuple[object, str]]
) -> dict[tuple[object, str], tuple[int, str, bool]]:
    found: dict[tuple[object, str], tuple[int, str, bool]] = {}
    by_owner: dict[object, list[str]] = {}
    for owner, key in dict.fromkeys(keys):
        by_owner.setdefault(owner, []).append(key)
    for owner, unique in by_owner.items():
        params = {"owner": owner, "keys": unique}
        for r in conn.execute(db.q("jobs_by_keys"), params):
            found[owner, r["key"]] = (r["id"], r["fingerprint"], bool(r["due"]))
    return found


def _read_row(db: PgDb, conn: PgConn, job_id: int) -> RowLike:
    return _row(conn.execute(db.q("job_by_id"), {"id": job_id}).fetchone())


def _row(row: RowLike | None) -> RowLike:
    if row is None:  # read in the transaction that found it: cannot be gone
        raise AssertionError("a job read in this transaction vanished")
    return row


def _auto_key(now_ms: int, job_id: int) -> str:
    """A key for a job enqueued without one: time first (the index's right edge), then the
    job's id, unique by itself (the sequence never repeats)."""
    return f"job-{now_ms:012x}{job_id:016x}"


__all__ = [
    "ITEM_ERRORS",
    "KeylessPlan",
    "insert_groups_tx",
    "insert_prepared",
    "insert_rows",
    "insert_tx",
    "numbered_rows",
]
