"""Worker queues in the store, once for both backends (docs/workers.md).

Written against :class:`jobctl.store.schedconn.SchedConn` (named statements of each
backend's query file), like the schedule logic: which queues are served by workers, the
rule that keeps a queue to one kind of job (checked in the inserting transaction), and
the lanes each kind of claim may take (:mod:`jobctl.domain.workers`).

Several writers at once (PostgreSQL, several daemons): the check and the write after it
must not interleave with another writer's, or a queue marked as a worker queue while a
command job is inserted into it would hold both kinds. So each writer first locks the
queue names it checks (:func:`lock`, in one order: no cycle of waits): exclusive where
the queue may become a worker queue (:func:`mark`, a payload job), shared where a job
only needs its kind checked (concurrent inserts of command jobs do not wait for each
other). The reads come after the lock, in a statement of their own, so they see every
conflicting writer's commit. A mark then writes the queue's row: a batch locks the rows
of the queues it may mark first, in name order (:func:`lock_rows`), so its marks, in the
batch's order, find theirs held (PostgreSQL's one lock order for queues, every advisory
lock before every row: :mod:`jobctl.store.pg.lockorder`). SQLite has one writer: there
the locks are nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence

from jobctl.domain.models import JobSpec
from jobctl.errors import Conflict, JobctlError
from jobctl.store.schedconn import SchedConn


def worker_queues(c: SchedConn) -> dict[str, tuple[str, ...]]:
    """Every worker queue with its ``workers`` list (who else may lease its jobs)."""
    return {r["name"]: tuple(json.loads(r["workers"])) for r in c.rows("worker_queues", {})}


def mark(c: SchedConn, name: str, allow: Sequence[str] | None = None) -> tuple[str, ...]:
    """Make ``name`` a worker queue (``allow``: set its list; None: keep it). A queue
    with command or http jobs waiting or running cannot become one (a Conflict)."""
    c.lock_queues([(name, True)])  # held already when an insert marks it: no wait then
    c.lock_queue_rows([name])  # held already when a batch marks it (lock_rows)
    known = worker_queues(c)
    if name not in known and c.one("queue_live", {"name": name}) is not None:
        raise _live(name)
    text = None if allow is None else json.dumps(list(allow))
    row = c.one("mark_worker_queue", {"name": name, "workers": text or "[]", "set_workers": text})
    assert row is not None  # RETURNING of an upsert
    return tuple(json.loads(row["workers"]))


def check_kinds(c: SchedConn, groups: Sequence[Sequence[JobSpec]]) -> dict[int, JobctlError]:
    """Insert groups (by index) refused because they mix a queue's kinds: a command or
    http job for a worker queue, or a payload job for a queue with other jobs. A payload
    job's queue that is not yet a worker queue becomes one here, in the same transaction."""
    payload_queues = {s.queue for g in groups for s in g if s.payload is not None}
    lock(c, _kinds(groups, payload_queues))
    if not payload_queues:
        return refuse_for_workers(groups, names(c))
    known = names(c)
    lock_rows(
        c, (spec.queue for group in groups for spec in group if spec.payload is not None), known
    )
    refused: dict[int, JobctlError] = {}
    commands: set[str] = set()  # queues given command or http jobs by groups admitted
    for i, group in enumerate(groups):
        try:
            for spec in group:
                if spec.payload is not None and spec.queue in commands:
                    raise _live(spec.queue)  # stored before this group: as if committed
                admit(c, spec.queue, spec.payload is not None, known)
        except Conflict as exc:
            refused[i] = exc
            continue
        commands.update(spec.queue for spec in group if spec.payload is None)
    return refused


def _kinds(
    groups: Sequence[Sequence[JobSpec]], payload_queues: set[str]
) -> Iterator[tuple[str, bool]]:
    """Each queue of ``groups`` once, and whether a payload job goes to it: what
    :func:`lock_modes` makes of every job's (a batch's jobs mostly share a queue; a tuple
    per job cost the PostgreSQL committer ~0.5 µs a job of a 500-job batch, issue 15).
    Walked only by a backend that locks (a generator: SQLite's does not)."""
    for queue in {s.queue for g in groups for s in g}:
        yield queue, queue in payload_queues


def refuse_for_workers(
    groups: Sequence[Sequence[JobSpec]], known: set[str]
) -> dict[int, JobctlError]:
    """Groups (by index) of command or http jobs that name one of the worker queues
    ``known`` (read after :func:`lock`): the check of groups without payload jobs."""
    if not known:
        return {}
    return {
        i: _not_workers(spec.queue)
        for i, group in enumerate(groups)
        for spec in group
        if spec.queue in known
    }


def admit(c: SchedConn, queue: str, payload: bool, known: set[str] | None = None) -> None:
    """Raise Conflict unless a job of this kind may go to ``queue`` (a payload job's queue
    becomes a worker queue); ``known``: the worker queues, as read (kept up to date)."""
    held = names(c) if known is None else known
    if not payload:
        if queue in held:
            raise _not_workers(queue)
    elif queue not in held:
        mark(c, queue)
        held.add(queue)


def _live(name: str) -> Conflict:
    return Conflict(
        f"queue {name!r} has command or http jobs waiting or running: payload jobs "
        "(workers') need a queue of their own"
    )


def lock(c: SchedConn, kinds: Iterable[tuple[str, bool]]) -> None:
    """Lock the queues of these jobs (queue, is a payload job) until the transaction ends,
    before their kinds are read (see the module docstring). ``kinds`` is read only by a
    backend with several writers (SQLite's hot insert path does not walk it)."""
    c.lock_queues(kinds)


def lock_rows(c: SchedConn, payload_queues: Iterable[str], known: set[str]) -> None:
    """Before a batch's marks: lock the rows of the queues its payload jobs may make worker
    queues (those not ``known`` as such), in name order, so that the marks, in the batch's
    order, find their rows held (PostgreSQL's lock order, :mod:`jobctl.store.pg.lockorder`;
    their advisory locks, exclusive, come first, from :func:`lock`)."""
    c.lock_queue_rows(q for q in payload_queues if q not in known)


def lock_modes(kinds: Iterable[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """Each queue once, in name order, exclusive when a payload job goes to it (it may
    become a worker queue), else shared."""
    modes: dict[str, bool] = {}
    for queue, payload in kinds:
        modes[queue] = modes.get(queue, False) or payload
    return sorted(modes.items())


def names(c: SchedConn) -> set[str]:
    """The worker queues' names (read once per batch: :func:`admit` keeps them up to date)."""
    return {r["name"] for r in c.rows("worker_queues", {})}


def _not_workers(queue: str) -> Conflict:
    return Conflict(
        f"queue {queue!r} is served by workers: it takes payload jobs only "
        "(give the command or request another queue)"
    )


__all__ = [
    "admit",
    "check_kinds",
    "lock",
    "lock_modes",
    "lock_rows",
    "mark",
    "names",
    "refuse_for_workers",
    "worker_queues",
]
