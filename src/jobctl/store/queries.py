"""Named SQL, loaded by name from ``sql/queries.sql`` (procrastinate's way).

Keeping SQL in one file makes every statement greppable and reviewable in one place
and keeps Python free of string-built SQL. The one exception is a column list declared
in Python once for every backend: ``{job_insert_columns}``, ``{job_insert_params}`` and
``{job_tail_params}`` expand to :data:`jobctl.store.jobrow.INSERT_COLUMNS`, one
placeholder per column, and one per column of a row tail (``TAIL_COLUMNS``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources

from jobctl.store.jobrow import INSERT_COLUMNS, TAIL_COLUMNS

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """Split a query file into ``{name: sql}``; names must be unique."""
    parts = _NAME.split(text)
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in out:
            raise ValueError(f"duplicate query name {name!r}")
        sql = "\n".join(
            line for line in body.strip().splitlines() if not line.lstrip().startswith("--")
        )
        out[name] = sql.strip().rstrip(";")
    return out


def macros(placeholder: str) -> dict[str, str]:
    """The column-list macros, with ``placeholder`` as the backend's positional marker."""
    return {
        "{job_insert_columns}": ", ".join(INSERT_COLUMNS),
        "{job_insert_params}": ", ".join([placeholder] * len(INSERT_COLUMNS)),
        "{job_tail_params}": ", ".join([placeholder] * len(TAIL_COLUMNS)),
    }


def expand(found: Mapping[str, str], table: Mapping[str, str]) -> dict[str, str]:
    """``found`` with every macro of ``table`` replaced in every statement."""
    out = {}
    for name, sql in found.items():
        expanded = sql
        for macro, text in table.items():
            expanded = expanded.replace(macro, text)
        out[name] = expanded
    return out


def load(path: str, placeholder: str) -> dict[str, str]:
    """The named queries of ``path`` (under ``jobctl.store``), macros expanded."""
    text = resources.files("jobctl.store").joinpath(path).read_text()
    return expand(parse_queries(text), macros(placeholder))


@cache
def queries() -> dict[str, str]:
    return load("sql/queries.sql", "?")


def q(name: str) -> str:
    """The SQL text of query ``name``."""
    return queries()[name]
