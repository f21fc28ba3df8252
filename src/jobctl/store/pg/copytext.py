"""The ``COPY`` data of a batch of job rows, built here in one join instead of by
psycopg's per-row formatter.

Why: a 500-job batch handed every row to ``Copy.write_row``, which dumps each of its 26
values on its own (adapter lookup, a dumper per value): about a tenth of the PostgreSQL
committer's CPU per job (issue 15). The rows of a batch mostly share their body (the
template columns, :data:`jobctl.store.jobrow.TEMPLATE_COLUMNS`) and often their per-job
columns but the id, key and fingerprint, so those parts are rendered once per distinct
value and each row is one f-string.

What stays the same: the text psycopg's text ``COPY`` sends for these values (``str``:
its characters with ``\\b \\t \\n \\v \\f \\r \\\\`` escaped; ``int``: its decimal digits;
``None``: ``\\N``), so the server stores the same values (a contract test pins the stored
rows). Anything else (another type, a bool, a NUL character, text that does not encode)
makes :func:`copy_data` answer None, and the caller hands the rows to psycopg as before,
so its errors stay psycopg's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from jobctl.store.jobrow import TAIL_AT, TAIL_COLUMNS, TEMPLATE_COLUMNS

#: Where the template columns start and end in an insert row (id, key, fingerprint first).
_TEMPLATE = slice(TAIL_AT, TAIL_AT + len(TEMPLATE_COLUMNS))
_PER_JOB = slice(_TEMPLATE.stop, None)
#: The numbers a row passes through from its spec as given (a bool or a float there
#: equals an int but is not its text): checked in every row. Its parts are looked up by
#: value, and every other number in them is made by the encoders of
#: :mod:`jobctl.store.jobrow` (``int()``, ``to_ms``); equal text is the same text.
_OWNER, _PRIORITY, _MAX_ATTEMPTS = (
    TAIL_AT + TAIL_COLUMNS.index(c) for c in ("owner_uid", "priority", "max_attempts")
)
#: What psycopg's text COPY escapes (psycopg/_copy_base.py, ``_dump_repl``).
_SPECIAL = re.compile(r"[\b\t\n\v\f\r\\]")
_ESCAPES = str.maketrans(
    {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r", "\\": "\\\\"}
)


class NotPlain(Exception):
    """A value this module does not render the way psycopg would (psycopg must)."""


def field(value: object) -> str:
    """One value as text ``COPY`` reads it (see the module docstring)."""
    if value is None:
        return "\\N"
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is str:
        text: str = value  # type: ignore[assignment]
        if "\x00" in text:
            raise NotPlain("NUL")
        return text if _SPECIAL.search(text) is None else text.translate(_ESCAPES)
    raise NotPlain(kind.__name__)


def copy_data(rows: Sequence[tuple[object, ...]], suffix: str, encoding: str) -> bytes | None:
    """The ``COPY`` text of ``rows`` (insert rows, :data:`jobctl.store.jobrow.INSERT_COLUMNS`),
    each followed by the columns ``suffix`` (already ``COPY`` text, e.g. the status), in
    ``encoding``; None when a value is not one this module renders (see the module
    docstring)."""
    parts: dict[tuple[object, ...], str] = {}

    def part(values: tuple[object, ...]) -> str:
        text = parts.get(values)
        if text is None:
            text = parts[values] = "\t".join([field(v) for v in values])
        return text

    lines = []
    try:
        for row in rows:
            job_id = row[0]
            if not (
                type(job_id) is int
                and type(row[_OWNER]) is int
                and type(row[_PRIORITY]) is int
                and type(row[_MAX_ATTEMPTS]) is int
            ):
                raise NotPlain("a number that is not an int")
            lines.append(
                f"{job_id}\t{field(row[1])}\t{field(row[2])}\t"
                f"{part(row[_TEMPLATE])}\t{part(row[_PER_JOB])}\t{suffix}\n"
            )
        return "".join(lines).encode(encoding)
    except (NotPlain, UnicodeError):
        return None


__all__ = ["copy_data", "field"]
