"""A plain column table for the hot list commands, without rich.

``jobctl list`` is run in loops by scripts and must start fast (issue 12: ≤ 100 ms).
Importing rich and laying a 50-row table out with it cost about 60 ms of a ~115 ms run
on the benchmark machine (docs/benchmarks.md, "CLI start-up"); a list needs none of
rich's layout: left-aligned columns, two spaces apart, a bold header and a coloured
status on a terminal, plain text in a pipe. Cells are plain text (no markup to escape).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

_COLOURS = {"cyan": "36", "yellow": "33", "green": "32", "red": "31", "dim": "2", "bold": "1"}


def _tty() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


@dataclass
class PlainTable:
    """The part of rich's ``Table`` that :mod:`jobctl.cli.pages` uses, drawn plainly.

    ``styles`` maps a column to a function naming the style of a cell's value (or "")."""

    columns: list[str]
    widths: dict[int, int] = field(default_factory=dict)  # column -> cut at this many chars
    show_header: bool = True
    title: str | None = None
    rows: list[list[str]] = field(default_factory=list)
    styles: dict[int, dict[str, str]] = field(default_factory=dict)

    def add_row(self, *cells: str) -> None:
        self.rows.append([self._cut(i, c) for i, c in enumerate(cells)])

    def _cut(self, i: int, cell: str) -> str:
        limit = self.widths.get(i)
        return cell[:limit] if limit else cell

    def lines(self, colour: bool | None = None) -> list[str]:
        """The table's lines; ``colour`` (default: stdout is a terminal) adds ANSI styles."""
        colour = _tty() if colour is None else colour
        rows = [self.columns, *self.rows] if self.show_header else self.rows
        width = [max(len(r[i]) for r in rows) for i in range(len(self.columns))]
        out = [] if self.title is None or not self.show_header else [self.title]
        for n, row in enumerate(rows):
            head = self.show_header and n == 0
            cells = []
            for i, cell in enumerate(row):
                pad = " " * (width[i] - len(cell)) if i < len(row) - 1 else ""
                style = "bold" if head else self.styles.get(i, {}).get(cell, "")
                shown = f"\x1b[{_COLOURS[style]}m{cell}\x1b[0m" if colour and style else cell
                cells.append(shown + pad)
            out.append("  ".join(cells).rstrip())
        return out

    def print(self) -> None:
        sys.stdout.write("\n".join(self.lines()) + "\n")
