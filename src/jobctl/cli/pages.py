"""How every list command shows pages: ``--limit``, ``--cursor``, ``--all`` and ``--json``.

A list command asks the daemon for one page (``--limit`` items, from ``--cursor`` or the
start) and prints it; when more follow it says so on standard error, with the command
line that continues. ``--all`` streams: it prints each page as it arrives and asks for
the next, so neither the daemon nor this process ever holds more than a page, whatever
the store holds. With ``--json`` one page prints as ``{"items": [...], "next_cursor":
...}``; ``--all --json`` prints every page as one such object per line (JSON Lines, as
they arrive: ``jq -c '.items[]'`` flattens them). No Typer here: the fast path
(:mod:`jobctl.cli.fast`) uses it too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from jobctl.cli.plaintable import PlainTable

if TYPE_CHECKING:
    from rich.table import Table

#: Draws one page's items as a table (rich's, or a plain one for the hot lists).
Draw = Callable[[list[dict[str, Any]]], "Table | PlainTable"]


def show(
    pages: Iterator[dict[str, Any]],
    *,
    every: bool,
    json_: bool,
    draw: Draw,
    empty: str,
    again: str,
) -> None:
    """Print the first page of ``pages``, or with ``every`` each of them as it comes.

    ``again`` is the command line (without ``--cursor``) that shows the next page.
    """
    if not every:
        got = next(pages)
        if json_:
            sys.stdout.write(json.dumps(got, indent=2) + "\n")
            return
        _draw(got["items"], draw, empty, header=True)
        if got["next_cursor"] is not None:
            sys.stderr.write(f"more: {again} --cursor {got['next_cursor']}  (or --all)\n")
        return
    first = True
    for got in pages:
        if json_:
            sys.stdout.write(json.dumps(got, separators=(",", ":")) + "\n")
        elif got["items"] or first:
            _draw(got["items"], draw, empty, header=first)
        sys.stdout.flush()
        first = False


def _draw(items: list[dict[str, Any]], draw: Draw, empty: str, *, header: bool) -> None:
    if not items:
        sys.stdout.write(empty + "\n")
        return
    table = draw(items)
    table.show_header = header
    table.title = table.title if header else None
    if isinstance(table, PlainTable):  # the hot lists: no rich at all (cli/plaintable.py)
        table.print()
        return
    from jobctl.cli import render  # rich costs start-up time: load it only to draw

    render.console.print(table)


def params(limit: int, cursor: str | None, **filters: Any) -> dict[str, Any]:
    """The query of a list request: the filters given, ``limit`` and ``cursor``."""
    out = {k: v for k, v in filters.items() if v is not None and v is not False}
    out["limit"] = limit
    if cursor is not None:
        out["cursor"] = cursor
    return {k: ("true" if v is True else v) for k, v in out.items()}
