"""The ``jobs`` row, declared once for every backend: its columns, how a new job's row
is encoded and how a row is decoded back into a :class:`Job`.

A new job field lands here (and in a migration of each backend): the insert statements
take their column list from :data:`INSERT_COLUMNS` (``{job_insert_columns}`` in a query
file, see :mod:`jobctl.store.queries`), the positions other modules need are derived
from it, and the materializer builds rows from the same two parts as an enqueue:

* :data:`TEMPLATE_COLUMNS` come from a job's body and are the same for every occurrence
  of a schedule (:func:`template_values`, rendered once per template);
* :data:`PER_JOB_COLUMNS` vary per job (:func:`per_job_values`).

The encoders are written out, not looped over the column names, because enqueue is the
hot path (a loop of per-column calls cost about 7% of a batched insert); a unit test
holds each encoder equal to its column tuple.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Hashable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from jobctl.domain import http as web
from jobctl.domain import resources as res
from jobctl.domain.dispatch import sort_key_ms
from jobctl.domain.models import (
    Attempt,
    Backoff,
    Job,
    JobSpec,
    fingerprint_of,
    is_current_fingerprint,
    stored_spec,
    trusted_spec,
)
from jobctl.domain.slotted import compile_builder
from jobctl.domain.states import JobStatus
from jobctl.store.rows import RowLike, env_pairs, ms_to_dt, opt_ms, to_ms

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Columns taken from the job's body (a schedule's template gives them once).
TEMPLATE_COLUMNS = (
    "queue", "command", "env", "cwd", "owner_uid", "priority", "max_attempts", "timeout_ms",
    "backoff_base_ms", "backoff_cap_ms", "retry_on", "no_retry_on", "resources", "on_failure",
    "http", "payload",
)  # fmt: skip
#: Columns that differ from job to job.
PER_JOB_COLUMNS = ("created_at", "run_at", "due", "schedule_id", "scheduled_for", "sort_key")
#: The columns an insert writes, in the order of an insert row (``status`` is always
#: ``'scheduled'``; the rest of the row has defaults).
INSERT_COLUMNS = ("id", "key", "fingerprint", *TEMPLATE_COLUMNS, *PER_JOB_COLUMNS)
#: A row tail is an insert row without id, key and fingerprint.
TAIL_COLUMNS = INSERT_COLUMNS[3:]
#: Positions in a row tail (and, plus :data:`TAIL_AT`, in an insert row).
QUEUE = TAIL_COLUMNS.index("queue")
OWNER = TAIL_COLUMNS.index("owner_uid")
DUE = TAIL_COLUMNS.index("due")
TAIL_AT = 3
#: The fields of the job body the fingerprint always covers, as columns (and back);
#: ``resources`` and ``on_failure`` count only when set
#: (:func:`jobctl.domain.models.fingerprint_fields`).
FINGERPRINT_COLUMNS = (
    "backoff_base_ms", "backoff_cap_ms", "command", "cwd", "env", "max_attempts",
    "no_retry_on", "owner_uid", "priority", "queue", "retry_on", "schedule_id", "timeout_ms",
)  # fmt: skip


class _Body(Protocol):
    """What a spec and a template share that the template columns are made of."""

    @property
    def command(self) -> tuple[str, ...]: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def backoff(self) -> Backoff: ...
    @property
    def env(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def cwd(self) -> str: ...
    @property
    def retry_on(self) -> tuple[int, ...] | None: ...
    @property
    def no_retry_on(self) -> tuple[int, ...]: ...
    @property
    def resources(self) -> res.Resources | None: ...
    @property
    def on_failure(self) -> str | None: ...
    @property
    def http(self) -> web.HttpRequest | None: ...
    @property
    def payload(self) -> str | None: ...


class TextMemo(dict[tuple[object, ...], str]):
    """The JSON text of a batch's commands and environments, each distinct one rendered
    once: the jobs of a batch mostly share them, and rendering was ~8% of its insert.
    Also their times in ms (:meth:`ms`)."""

    __slots__ = ("_ms",)

    def __init__(self) -> None:
        super().__init__()
        self._ms: dict[datetime, int] = {}

    def __missing__(self, value: tuple[object, ...]) -> str:
        text = self[value] = json.dumps(value)  # a tuple renders as a JSON list
        return text

    def ms(self, when: datetime) -> int:
        """:func:`jobctl.store.rows.to_ms` of ``when``, each distinct time once (a batch's
        jobs mostly share their ``run_at``; equal times are the same instant)."""
        try:
            return self._ms[when]
        except KeyError:
            ms = self._ms[when] = to_ms(when)
            return ms


def template_values(body: _Body, owner_uid: int, text: TextMemo) -> tuple[object, ...]:
    """:data:`TEMPLATE_COLUMNS` of a job with this body, in order."""
    return (
        body.queue,
        text[body.command],
        text[body.env],
        body.cwd,
        owner_uid,
        body.priority,
        body.max_attempts,
        None if body.timeout is None else int(round(body.timeout * 1000)),
        int(round(body.backoff.base * 1000)),
        int(round(body.backoff.cap * 1000)),
        None if body.retry_on is None else json.dumps(list(body.retry_on)),
        json.dumps(list(body.no_retry_on)) if body.no_retry_on else None,
        res.to_text(body.resources),
        body.on_failure,
        None if body.http is None else web.to_text(body.http),
        body.payload,
    )


def per_job_values(
    now_ms: int, run_ms: int, priority: int, schedule_id: str | None, scheduled_for: int | None
) -> tuple[object, ...]:
    """:data:`PER_JOB_COLUMNS` of one job, in order."""
    return (
        now_ms,
        run_ms,
        int(run_ms <= now_ms),
        schedule_id,
        scheduled_for,
        sort_key_ms(run_ms, priority),
    )


def row_tail(spec: JobSpec, now_ms: int, text: TextMemo | None = None) -> tuple[object, ...]:
    """The insert row of ``spec`` after id, key and fingerprint (:data:`TAIL_COLUMNS`)."""
    memo = TextMemo() if text is None else text
    run_ms = memo.ms(spec.run_at)
    return template_values(spec, spec.owner_uid, memo) + (
        per_job_values(now_ms, run_ms, spec.priority, spec.schedule_id, opt_ms(spec.scheduled_for))
    )


# -- decoding ---------------------------------------------------------------------------


#: The columns a :class:`JobSpec` is decoded from (:func:`job_from_row`), every one but
#: ``key`` (each job's own): rows equal in all of them decode to specs that differ in the
#: key alone, so a read's rows share one decoding.
SPEC_COLUMNS = (*TEMPLATE_COLUMNS, "run_at", "schedule_id", "scheduled_for")
_spec_columns = operator.itemgetter(*SPEC_COLUMNS)


class RowMemo:
    """Conversions of column values by their input, shared by the rows of one read (a
    claim's herd shares command, env, ``run_at`` and lease): a claim of a thousand jobs
    spent about half its time parsing the same JSON and times again. Whole specs too: the
    rows of a herd decode to specs that differ in their key only, so the second is a
    copy of the first with its own key (issue 17: a dozen lookups less per claimed row)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, Hashable], Any] = {}
        self._specs: dict[tuple[Any, ...], JobSpec] = {}

    def get(self, kind: str, value: K, fn: Callable[[K], V]) -> V:
        key = (kind, value)
        try:
            out: V = self._seen[key]
        except KeyError:
            out = self._seen[key] = fn(value)
        return out

    def dt(self, ms: int | None) -> datetime | None:
        return None if ms is None else self.get("dt", ms, ms_to_dt)

    def spec(self, row: RowLike) -> JobSpec:
        """The spec ``row`` holds: the one decoded for an earlier row of the same
        :data:`SPEC_COLUMNS` values with ``row``'s key, if there was one."""
        columns = _spec_columns(row)
        seen = self._specs.get(columns)
        if seen is None:
            seen = self._specs[columns] = _spec_from_row(row, self)
            return seen
        key = row["key"]
        return seen if seen.key == key else stored_spec(seen, seen.run_at, key, seen.scheduled_for)


def codes(text: str | None) -> tuple[int, ...] | None:
    """A stored JSON list of exit codes (``retry_on``, ``no_retry_on``)."""
    return None if text is None else tuple(json.loads(text))


def _command(text: str) -> tuple[str, ...]:
    return tuple(json.loads(text))


def _backoff(ms: tuple[int, int]) -> Backoff:
    return Backoff(ms[0] / 1000, ms[1] / 1000)


def job_from_row(
    row: RowLike, attempts: Sequence[Attempt] = (), memo: RowMemo | None = None
) -> Job:
    """The job a ``jobs`` row holds (every column, e.g. ``SELECT *`` or ``RETURNING *``).

    The spec is rebuilt without re-validation: it was checked when it was written, and a
    row is never refused on the way out (one old row that today's limits would refuse
    must not make a listing fail for everyone).
    """
    m = RowMemo() if memo is None else memo
    spec = m.spec(row)
    return _row_job(
        row,
        spec,
        m.get("status", row["status"], JobStatus),
        m.get("dt", row["created_at"], ms_to_dt),
        m.dt(row["lease_until"]),
        m.dt(row["finished_at"]),
        tuple(attempts),
    )


#: ``_row_job(row, spec, status, created_at, lease_until, finished_at, attempts)``: the
#: :class:`Job` of :func:`job_from_row`, stored slot by slot (``domain/slotted.py``: ~0.6
#: µs, not the frozen ``__init__``'s ~3 µs of ``object.__setattr__``; one per claimed row
#: on the daemon's loop, issue 17).
_row_job = compile_builder(
    Job,
    "_row_job",
    "row, spec, status, created_at, lease_until, finished_at, attempts",
    {
        "id": 'row["id"]',
        "key": 'row["key"]',
        "spec": "spec",
        "status": "status",
        "run_at": "spec.run_at",
        "created_at": "created_at",
        "attempt": 'row["attempt"]',
        "failures": 'row["failures"]',
        "generation": 'row["generation"]',
        "lease_owner": 'row["lease_owner"]',
        "lease_until": "lease_until",
        "finished_at": "finished_at",
        "last_error": 'row["last_error"]',
        "dead_reason": 'row["dead_reason"]',
        "attempts": "attempts",
        "notified": 'row["notified"]',
    },
)


def _spec_from_row(row: RowLike, m: RowMemo) -> JobSpec:
    """The spec a row holds, from :data:`SPEC_COLUMNS` only (see :func:`job_from_row`)."""
    run_at = m.get("dt", row["run_at"], ms_to_dt)
    timeout = row["timeout_ms"]
    return trusted_spec(
        command=m.get("cmd", row["command"], _command),
        run_at=run_at,
        owner_uid=row["owner_uid"],
        key=row["key"],
        queue=row["queue"],
        priority=row["priority"],
        max_attempts=row["max_attempts"],
        timeout=None if timeout is None else timeout / 1000,
        backoff=m.get("backoff", (row["backoff_base_ms"], row["backoff_cap_ms"]), _backoff),
        env=m.get("env", row["env"], env_pairs),
        cwd=row["cwd"],
        schedule_id=row["schedule_id"],
        scheduled_for=m.dt(row["scheduled_for"]),
        retry_on=m.get("codes", row["retry_on"], codes),
        no_retry_on=m.get("codes", row["no_retry_on"], codes) or (),
        resources=m.get("res", row["resources"], res.from_text),
        on_failure=row["on_failure"],
        http=m.get("http", row["http"], web.from_text),
        payload=row["payload"],
    )


# -- idempotency -------------------------------------------------------------------------


def row_fingerprint(row: RowLike) -> str:
    """Today's fingerprint of the body a stored row holds (what ``fingerprint()`` of the
    spec that wrote it gives; a test holds them equal)."""
    fields: dict[str, object] = {name: row[name] for name in FINGERPRINT_COLUMNS}
    fields["command"] = json.loads(row["command"])
    fields["env"] = sorted([k, v] for k, v in json.loads(row["env"]))
    fields["retry_on"] = None if row["retry_on"] is None else json.loads(row["retry_on"])
    fields["no_retry_on"] = json.loads(row["no_retry_on"]) if row["no_retry_on"] else []
    if row["resources"]:
        fields["resources"] = json.loads(row["resources"])
    if row["on_failure"] is not None:
        fields["on_failure"] = row["on_failure"]
    if row["http"]:
        fields["http"] = json.loads(row["http"])
    if row["payload"] is not None:
        fields["payload"] = row["payload"]
    return fingerprint_of(fields)


def same_body(stored: str, asked: str, row: Callable[[], RowLike]) -> bool:
    """Whether a request whose fingerprint is ``asked`` repeats the job stored with
    ``stored`` (``row`` reads that job's row, needed only for an old fingerprint).

    A fingerprint made by an older rule is not comparable with today's digest, so the job
    is compared by the body its row holds: an identical re-send of a job keyed before an
    upgrade is the same request, not a conflict. An empty fingerprint (a job enqueued
    without a key) matches nothing.
    """
    if stored == asked:
        return True
    if not stored or is_current_fingerprint(stored):
        return False
    return row_fingerprint(row()) == asked


__all__ = [
    "DUE",
    "INSERT_COLUMNS",
    "OWNER",
    "PER_JOB_COLUMNS",
    "QUEUE",
    "TAIL_AT",
    "TEMPLATE_COLUMNS",
    "RowMemo",
    "TextMemo",
    "job_from_row",
    "per_job_values",
    "row_fingerprint",
    "row_tail",
    "same_body",
    "template_values",
]
