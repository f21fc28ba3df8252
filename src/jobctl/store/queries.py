"""Named SQL, loaded by name from ``sql/queries.sql`` (procrastinate's way).

Keeping SQL in one file makes every statement greppable and reviewable in one place
and keeps Python free of string-built SQL.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

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


@cache
def queries() -> dict[str, str]:
    text = resources.files("jobctl.store").joinpath("sql/queries.sql").read_text()
    return parse_queries(text)


def q(name: str) -> str:
    """The SQL text of query ``name``."""
    return queries()[name]
