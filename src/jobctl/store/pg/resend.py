"""Keyed enqueues sent again after their one-round-trip commit was lost (issue 15).

A pipelined group commit (:mod:`jobctl.store.pg.pipelined`) sends ``COMMIT`` with the rest;
a connection lost after that may or may not have committed. For jobs without keys that is
a 503 to every caller: sending them again could store them twice. A job with its caller's
key cannot be stored twice (the unique index on owner and key), and a repeat of a stored
key with the same body answers the stored job: so the callers whose jobs all carry keys
are run again the checked way on a fresh connection (:meth:`Staged.resend`), as the
checked way's own transaction is when its connection is lost before its ``COMMIT``.

The answer is the one the lost commit would have given: 201 with the job, not 200 (the
caller sent one request, and either that commit stored the job or the second run does).
:func:`lost_answers` tells the two apart: the lost commit stored every job of the write
under its key with its body's fingerprint and the commit's own creation time (the plan's
clock reading, in ms); then it did commit, and each job is answered as created from what
was stored (its id), built exactly as the commit's own answer would have been. Otherwise
it committed nothing (it is all or nothing) and the checked way runs the jobs as new.

Why the creation time: nothing else the commit wrote is its own (the ids came from the
sequence, and were lost with the answer). A repeat of the same key and body by another
request, stored in the very same millisecond by another daemon, would also be answered
as created: both requests asked for that one job, and each gets it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol

from jobctl.domain.models import JobSpec
from jobctl.errors import JobctlError
from jobctl.store.base import Inserted
from jobctl.store.inserts import NewJob, created
from jobctl.store.jobrow import DUE, row_tail
from jobctl.store.pg.db import PgConn, PgDb
from jobctl.store.rows import ms_to_dt


class Answer(Protocol):
    """Where a caller's answer goes (a :class:`concurrent.futures.Future`, or the event
    loop's lighter slot: :class:`jobctl.store.pg.insertbatch.Slot`)."""

    def done(self) -> bool: ...

    def set_result(self, result: Any) -> None: ...

    def set_exception(self, exception: BaseException | None) -> None: ...


Caller = tuple[Sequence[Sequence[JobSpec]], Answer]


def split_keyed(callers: Sequence[Caller]) -> tuple[list[Caller], list[Caller]]:
    """``callers`` whose jobs all carry keys (safe to send again), and the others."""
    keyed: list[Caller] = []
    other: list[Caller] = []
    for caller in callers:
        groups = caller[0]
        safe = all(s.key is not None for g in groups for s in g)
        (keyed if safe else other).append(caller)
    return keyed, other


def lost_answers(
    db: PgDb, conn: PgConn, groups: Sequence[Sequence[JobSpec]], lost: Collection[int]
) -> list[list[Inserted] | JobctlError] | None:
    """Each group's answer as a lost commit of ``groups`` would have given it, if one went
    through; None if none did (see the module docstring). ``lost``: the creation times of
    the lost commits (one, unless the second run was pipelined and lost too). Every job of
    ``groups`` has a key."""
    specs = [s for g in groups for s in g]
    wanted = [(s.owner_uid, str(s.key)) for s in specs]
    if len(set(wanted)) < len(wanted):
        return None  # a key twice: the unique index failed that commit's INSERT
    stored = _made(db, conn, wanted)
    rows = [stored.get(w) for w in wanted]
    made = {r[1] for r in rows if r is not None}
    if None in rows or len(made) != 1 or not made <= set(lost):
        return None  # one commit stored them all, or none
    (made_ms,) = made
    created_at = ms_to_dt(made_ms)
    found = iter(rows)
    out: list[list[Inserted] | JobctlError] = []
    for group in groups:
        answers = []
        for spec in group:
            row = next(found)
            assert row is not None
            if row[2] != spec.fingerprint():
                return None  # another body: not this write's commit (a conflict, checked)
            due = bool(row_tail(spec, made_ms)[DUE])  # as the commit computed it
            new = NewJob(row[0], True, str(spec.key), due)
            answers.append(created(spec, new, created_at))  # as the commit's answer
        out.append(answers)
    return out


def _made(
    db: PgDb, conn: PgConn, wanted: Sequence[tuple[int, str]]
) -> dict[tuple[int, str], tuple[int, int, str]]:
    """(id, created_at, fingerprint) of the jobs stored under ``wanted`` (owner, key)."""
    by_owner: dict[int, list[str]] = {}
    for owner, key in wanted:
        by_owner.setdefault(owner, []).append(key)
    found: dict[tuple[int, str], tuple[int, int, str]] = {}
    for owner, keys in by_owner.items():
        params = {"owner": owner, "keys": keys}
        for r in conn.execute(db.q("jobs_made_by_keys"), params):
            found[owner, r["key"]] = (int(r["id"]), int(r["created_at"]), str(r["fingerprint"]))
    return found


__all__ = ["Caller", "lost_answers", "split_keyed"]
