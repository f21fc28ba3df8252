"""Claimed rows to :class:`Claim` objects, cheaply.

A claim of a thousand jobs used to spend about half its time decoding rows: JSON
parsing, ``datetime`` conversion and the re-validation of each :class:`JobSpec` the
store validated when the job was accepted. The rows of one claim share one
:class:`~jobctl.store.jobrow.RowMemo` (a herd's jobs have the same command, env,
``run_at`` and lease), and :func:`~jobctl.store.jobrow.job_from_row` rebuilds specs
without re-validation.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from jobctl.domain.models import Claim
from jobctl.domain.queue_defaults import with_queue_limits
from jobctl.domain.resources import Resources
from jobctl.store.jobrow import RowMemo, job_from_row
from jobctl.store.rows import RowLike

#: A SQLite claim transaction's answer: the claimed rows and their queues' limits.
ClaimRows = tuple[list[dict[str, Any]], dict[str, Resources]]


def claims_in_order(
    found: Sequence[RowLike], queue_limits: Mapping[str, Resources] | None = None
) -> list[Claim]:
    """Claims of a SQLite claim's rows, in dispatch order across lanes (``queue_limits``
    as for :func:`claims_from_rows`)."""
    rows = as_dicts(found)
    return claims_from_rows(sorted(rows, key=lambda r: (r["sort_key"], r["id"])), queue_limits)


def as_dicts(found: Sequence[RowLike]) -> Sequence[RowLike]:
    """``sqlite3.Row`` objects as dicts, their column names read once (issue 17): a Row
    finds a column by name with a case-blind scan of every column, and decoding a claimed
    row reads about thirty of its forty; building a dict first costs half as much."""
    if not found or not isinstance(found[0], sqlite3.Row):
        return found
    return row_dicts(found)  # type: ignore[arg-type]


def row_dicts(found: Sequence[sqlite3.Row]) -> list[dict[str, Any]]:
    """``found`` as dicts (see :func:`as_dicts`): the claim transaction makes them once,
    for its own reads of the rows and for :func:`claims_in_order`."""
    if not found:
        return []
    names = found[0].keys()
    return [dict(zip(names, r, strict=True)) for r in found]


def claims_from_rows(
    found: Sequence[RowLike], queue_limits: Mapping[str, Resources] | None = None
) -> list[Claim]:
    """Claims of rows returned by a claim (every column), in the given order.

    ``queue_limits``: the resource limits of queues that give some, by name: a claimed
    job gets its queue's where it gives none (the limits its attempt runs under)."""
    memo = RowMemo()
    out = []
    for r in found:
        job = job_from_row(r, memo=memo)
        if queue_limits:
            job = with_queue_limits(job, queue_limits.get(job.spec.queue))
        assert job.lease_until is not None  # a claimed row holds its lease
        out.append(Claim(job, r["attempt"], r["generation"], job.lease_until))
    return out


__all__ = ["ClaimRows", "as_dicts", "claims_from_rows", "claims_in_order", "row_dicts"]
